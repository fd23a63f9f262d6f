//! The IR as text (`vlad compile --emit ir`): one function after another, statements indented by
//! nesting, every variable with its type where it is defined.

use crate::ir::*;
use std::fmt::Write as _;

/// The whole program.
pub fn program(p: &Program) -> String {
    let mut out = String::new();
    for (i, g) in p.globals.iter().enumerate() {
        let _ = writeln!(out, "global g{i} {}: {}", g.name, g.ty);
    }
    if !p.globals.is_empty() {
        out.push('\n');
    }
    for id in p.ids() {
        out.push_str(&function(p, id));
        out.push('\n');
    }
    out
}

/// One function.
pub fn function(p: &Program, id: FuncId) -> String {
    let f = p.func(id);
    let mut pr = Printer {
        p,
        f,
        out: String::new(),
    };
    let kind = match &f.kind {
        FuncKind::Specialised { key } => format!("; the specialised function of key {key}"),
        FuncKind::Helper { exported, .. } => {
            format!(
                "; {}",
                if *exported {
                    "called by the runtime"
                } else {
                    "helper"
                }
            )
        }
        FuncKind::Export { name } => format!("; exported as vlad_{name}"),
        FuncKind::Merged { members } => format!(
            "; the loop of {}",
            members
                .iter()
                .map(|f| p.func_name(*f))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        FuncKind::Machine(m) => format!(
            "; the explicit-stack machine of {}",
            m.members
                .iter()
                .map(|mb| p.func_name(mb.func))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        FuncKind::MachineEntry { machine, member } => {
            format!("; entry of member {member} of {}", p.func_name(*machine))
        }
    };
    let params: Vec<String> = f.params.iter().map(|v| pr.decl(*v)).collect();
    let _ = writeln!(
        pr.out,
        "{}fn {}({}) -> {} {{  {kind}",
        if f.cold { "cold " } else { "" },
        p.func_name(id),
        params.join(", "),
        LayoutDisplay(&f.results)
    );
    if let FuncKind::Machine(m) = &f.kind {
        for (j, mb) in m.members.iter().enumerate() {
            let frame: Vec<&str> = mb.frame.iter().map(|v| f.name(*v)).collect();
            let ps: Vec<String> = mb.params.iter().map(|v| pr.decl(*v)).collect();
            let _ = writeln!(
                pr.out,
                "  ; member {j}: {}({}) -> {}, frame [{}], {} resume points",
                p.func_name(mb.func),
                ps.join(", "),
                LayoutDisplay(&mb.results),
                frame.join(", "),
                mb.resumes
            );
        }
    }
    pr.block(&f.body, 1);
    pr.out.push_str("}\n");
    pr.out
}

struct Printer<'a> {
    p: &'a Program,
    f: &'a Function,
    out: String,
}

impl Printer<'_> {
    fn decl(&self, v: Var) -> String {
        format!("{}: {}", self.f.name(v), self.f.ty(v))
    }

    fn operand(&self, x: &Operand) -> String {
        match x {
            Operand::Var(v) => self.f.name(*v).to_string(),
            Operand::F64(x) => {
                if x.is_finite() {
                    format!("{x:?}")
                } else {
                    format!("{x}")
                }
            }
            Operand::Bool(b) => (if *b { "#t" } else { "#f" }).to_string(),
            Operand::I64(n) => format!("{n}i"),
            Operand::Null => "null".into(),
            Operand::Global(g) => self
                .p
                .globals
                .get(g.0 as usize)
                .map_or_else(|| format!("g{}", g.0), |g| g.name.clone()),
            Operand::Str(s) => format!("{s:?}"),
        }
    }

    fn operands(&self, xs: &[Operand]) -> String {
        xs.iter()
            .map(|x| self.operand(x))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn line(&mut self, depth: usize, text: impl AsRef<str>) {
        // Nesting beyond this is not indented further: the text stays linear in the program.
        for _ in 0..depth.min(crate::MAX_INDENT) {
            self.out.push_str("  ");
        }
        self.out.push_str(text.as_ref());
        self.out.push('\n');
    }

    fn block(&mut self, b: &[Stmt], depth: usize) {
        for s in b {
            self.stmt(s, depth);
        }
    }

    fn op(&self, op: &Op) -> String {
        match op {
            Op::Copy(x) => self.operand(x),
            Op::Unary(u, x) => format!("{} {}", format!("{u:?}").to_lowercase(), self.operand(x)),
            Op::Binary(b, x, y) => format!(
                "{} {}, {}",
                format!("{b:?}").to_lowercase(),
                self.operand(x),
                self.operand(y)
            ),
            Op::Call { func, args, guard } => {
                let g = guard.map_or(String::new(), |g| {
                    format!(" (deep: {})", self.p.func_name(g))
                });
                format!(
                    "call {}({}){g}",
                    self.p.func_name(*func),
                    self.operands(args)
                )
            }
            Op::Rt(rt, args) => format!("rt {}({})", rt.c_name(), self.operands(args)),
            Op::NewArray { layout, count } => format!(
                "new array{} count {}",
                LayoutDisplay(layout),
                self.operand(count)
            ),
            Op::ArrayOf { layout, slots } => format!(
                "array{} of {} elements: {}",
                LayoutDisplay(layout),
                slots.len() / layout.len().max(1),
                self.operands(slots)
            ),
            Op::Load { array, index, slot } => format!(
                "load {}[{}].{slot}",
                self.operand(array),
                self.operand(index)
            ),
            Op::Length(a) => format!("length {}", self.operand(a)),
            Op::Field { obj, slot, .. } => format!("field {}.{slot}", self.operand(obj)),
            Op::IsKind(x, k) => format!("is {} {}", k.c_name(), self.operand(x)),
            Op::CodeOf(x) => format!("code of {}", self.operand(x)),
            Op::Cast(x, ty) => format!("cast {} to {ty}", self.operand(x)),
            Op::Mark => "mark".into(),
            Op::ReleaseCarrying { mark, arrays } => format!(
                "release {} carrying {}",
                self.operand(mark),
                self.operands(arrays)
            ),
            Op::Collect {
                mark,
                budget,
                values,
            } => format!(
                "collect {} budget {} keeping {}",
                self.operand(mark),
                self.operand(budget),
                self.operands(values)
            ),
            Op::MakeUnion {
                variant, fields, ..
            } => format!("union variant {variant}({})", self.operands(fields)),
            Op::UnionTag(x) => format!("tag of {}", self.operand(x)),
            Op::UnionField {
                value,
                variant,
                index,
            } => format!("{}.variant{variant}.{index}", self.operand(value)),
        }
    }

    fn stmt(&mut self, s: &Stmt, depth: usize) {
        match s {
            Stmt::Let(vs, op) => {
                let op = self.op(op);
                if vs.is_empty() {
                    self.line(depth, op);
                } else {
                    let ds: Vec<String> = vs.iter().map(|v| self.decl(*v)).collect();
                    self.line(depth, format!("{} = {op}", ds.join(", ")));
                }
            }
            Stmt::Declare(vs) => {
                let ds: Vec<String> = vs.iter().map(|v| self.decl(*v)).collect();
                self.line(depth, format!("var {}", ds.join(", ")));
            }
            Stmt::Set(v, x) => {
                let t = format!("{} := {}", self.f.name(*v), self.operand(x));
                self.line(depth, t);
            }
            Stmt::Site(n) => self.line(depth, format!("site {n}")),
            Stmt::Store {
                array,
                index,
                slot,
                value,
            } => {
                let t = format!(
                    "store {}[{}].{slot} = {}",
                    self.operand(array),
                    self.operand(index),
                    self.operand(value)
                );
                self.line(depth, t);
            }
            Stmt::SetField { obj, slot, value } => {
                let t = format!("set {}.{slot} = {}", self.operand(obj), self.operand(value));
                self.line(depth, t);
            }
            Stmt::SetGlobal(g, x) => {
                let name = self
                    .p
                    .globals
                    .get(g.0 as usize)
                    .map_or_else(|| format!("g{}", g.0), |g| g.name.clone());
                let t = format!("set global {name} = {}", self.operand(x));
                self.line(depth, t);
            }
            Stmt::Release(m) => {
                let t = format!("release {}", self.operand(m));
                self.line(depth, t);
            }
            Stmt::If { cond, then, els } => {
                let t = format!("if {} {{", self.operand(cond));
                self.line(depth, t);
                self.block(then, depth + 1);
                if !els.is_empty() {
                    self.line(depth, "} else {");
                    self.block(els, depth + 1);
                }
                self.line(depth, "}");
            }
            Stmt::Switch { on, cases, default } => {
                let t = format!("switch {} {{", self.operand(on));
                self.line(depth, t);
                for (vals, b) in cases {
                    let vs: Vec<String> = vals.iter().map(|v| v.to_string()).collect();
                    self.line(depth + 1, format!("case {}:", vs.join(", ")));
                    self.block(b, depth + 2);
                }
                self.line(depth + 1, "default:");
                self.block(default, depth + 2);
                self.line(depth, "}");
            }
            Stmt::For { index, count, body } => {
                let t = format!("for {} < {} {{", self.decl(*index), self.operand(count));
                self.line(depth, t);
                self.block(body, depth + 1);
                self.line(depth, "}");
            }
            Stmt::Loop(body) => {
                self.line(depth, "loop {");
                self.block(body, depth + 1);
                self.line(depth, "}");
            }
            Stmt::Continue => self.line(depth, "continue"),
            Stmt::Return(xs) => {
                let t = format!("return {}", self.operands(xs));
                self.line(depth, t.trim_end());
            }
            Stmt::TailCall { func, args } => {
                let t = format!(
                    "return call {}({})",
                    self.p.func_name(*func),
                    self.operands(args)
                );
                self.line(depth, t);
            }
            Stmt::Build {
                array,
                layout,
                count,
                index,
                body,
                elem,
            } => {
                let t = format!(
                    "{} = build array{} count {} index {} {{",
                    self.decl(*array),
                    LayoutDisplay(layout),
                    self.operand(count),
                    self.decl(*index)
                );
                self.line(depth, t);
                self.block(body, depth + 1);
                let t = format!("element {}", self.operands(elem));
                self.line(depth + 1, t);
                self.line(depth, "}");
            }
            Stmt::Ifold {
                accs,
                init,
                count,
                index,
                body,
                next,
            } => {
                let ds: Vec<String> = accs.iter().map(|v| self.decl(*v)).collect();
                let t = format!(
                    "{} = ifold from ({}) count {} index {} {{",
                    ds.join(", "),
                    self.operands(init),
                    self.operand(count),
                    self.decl(*index)
                );
                self.line(depth, t);
                self.block(body, depth + 1);
                let t = format!("next {}", self.operands(next));
                self.line(depth + 1, t);
                self.line(depth, "}");
            }
            Stmt::Member { member, body } => {
                self.line(depth, format!("member {member} {{"));
                self.block(body, depth + 1);
                self.line(depth, "}");
            }
            Stmt::MachineCall {
                member,
                args,
                results,
                resume,
            } => {
                let rs: Vec<String> = results.iter().map(|v| self.decl(*v)).collect();
                let t = format!(
                    "{}{}push member {member}({}), resume {resume}",
                    rs.join(", "),
                    if rs.is_empty() { "" } else { " = " },
                    self.operands(args)
                );
                self.line(depth, t);
            }
            Stmt::MachineTailCall { member, args } => {
                let t = format!("replace with member {member}({})", self.operands(args));
                self.line(depth, t);
            }
        }
    }
}
