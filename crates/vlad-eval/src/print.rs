//! Printing values in the reference implementation's external form: `()`, `#t`, `(1 . 2)`,
//! `(1 2 3)`, `(perturbation X)`, `(forward P T)`, `(sensitivity X)`, `(reverse X)`; reals in
//! shortest round-trip form. Procedures print as `<procedure>` (primitives as
//! `<procedure:NAME>`), which the reader reads back as a symbol.

use crate::value::Value;
use vlad_core::Tag;
use vlad_syntax::number::format_real;

pub fn to_string(v: &Value) -> String {
    let mut s = String::new();
    write(v, &mut s);
    s
}

fn write(v: &Value, s: &mut String) {
    // Tagged aggregates print as the tag applied to the untagged aggregate.
    if let Value::Pair(_) | Value::Array(_) = v {
        match v.tags().top() {
            Some(Tag::Forward) => {
                let (primal, tangent) = crate::ad::split_forward_shallow(v);
                s.push_str("(forward ");
                write(&primal, s);
                s.push(' ');
                write(&tangent, s);
                s.push(')');
                return;
            }
            Some(tag) => {
                s.push('(');
                s.push_str(tag.name());
                s.push(' ');
                write(&crate::ad::untag_shallow(v, tag), s);
                s.push(')');
                return;
            }
            None => {}
        }
    }
    match v {
        Value::Nil => s.push_str("()"),
        Value::Bool(true) => s.push_str("#t"),
        Value::Bool(false) => s.push_str("#f"),
        Value::Real(r) => s.push_str(&format_real(*r)),
        Value::Prim(p) => {
            s.push_str("<procedure:");
            s.push_str(p.name());
            s.push('>');
        }
        Value::Closure(_) => s.push_str("<procedure>"),
        // Callers materialise zeros before printing (`Evaluator::materialize`); this is a
        // fallback for error messages.
        Value::Zero(_) => s.push_str("(sensitivity <zero>)"),
        Value::SensArray(_) => s.push_str("(sensitivity <array>)"),
        Value::Array(a) => {
            s.push_str("#(");
            for (i, x) in a.elems.iter().enumerate() {
                if i > 0 {
                    s.push(' ');
                }
                write(x, s);
            }
            s.push(')');
        }
        Value::Bundle(b) => {
            s.push_str("(forward ");
            write(&b.primal, s);
            s.push(' ');
            write(&b.tangent, s);
            s.push(')');
        }
        Value::Tagged(t) => {
            s.push('(');
            s.push_str(t.tag.name());
            s.push(' ');
            write(&t.value, s);
            s.push(')');
        }
        Value::Pair(p) => {
            s.push('(');
            write(&p.car, s);
            let mut rest = &p.cdr;
            loop {
                match rest {
                    Value::Nil => break,
                    Value::Pair(q) if q.tags.is_empty() => {
                        s.push(' ');
                        write(&q.car, s);
                        rest = &q.cdr;
                    }
                    other => {
                        s.push_str(" . ");
                        write(other, s);
                        break;
                    }
                }
            }
            s.push(')');
        }
    }
}
