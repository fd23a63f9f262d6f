//! Arrays without AD tags (paper 002): `build`, `ifold`, `get`, `array-length` and array
//! literals, compiled to loops over *flat* arrays.
//!
//! The analysis gives an array one abstract element value (`Av::Array(tags, e)`), so every
//! element has the same layout: the array is one `V` leaf pointing to a runtime object whose
//! slot 0 is the length and whose element `i` is the `k` leaves of `e`'s layout at slots
//! `1 + i*k ...` (`vl_flat`). An array of reals is a length and a row of doubles; a known
//! element (`k` = 0) costs nothing per element. Flat arrays are never mutated after they are
//! built, so a literal is built once, at start-up, like a boxed constant.
//!
//! An array is boxed (`VL_ARRAY`, elements boxed) only to be printed or described in an error;
//! converting one to `Dyn` for the program's own use is refused, so boxed values (and the
//! runtime's AD operators and dispatches on them) never meet an array. AD tags on arrays are
//! refused too: their forward and reverse forms (`bundle` of arrays, lazy one-hot
//! sensitivities) are not compiled yet, and such programs run in the evaluator.

use super::{real_literal, Gen, Leaf, Val, R};
use std::fmt::Write as _;
use vlad_core::{Datum, Tags};
use vlad_flow::analysis::datum_av;
use vlad_flow::{Av, Target};

impl Gen<'_, '_> {
    /// The C expressions of the leaves of element `index` of flat array `arr`.
    fn flat_elem(&self, arr: &str, index: &str, layout: &[Leaf]) -> Vec<String> {
        let k = layout.len();
        layout
            .iter()
            .enumerate()
            .map(|(j, l)| format!("{arr}->s[1 + {index} * {k} + {j}].{}", l.slot()))
            .collect()
    }

    /// Stores `leaves` as element `index` of flat array `arr`.
    fn flat_store(&mut self, arr: &str, index: &str, layout: &[Leaf], leaves: &[String]) {
        let k = layout.len();
        for (j, (l, x)) in layout.iter().zip(leaves).enumerate() {
            self.line(format!(
                "{arr}->s[1 + {index} * {k} + {j}].{} = {x};",
                l.slot()
            ));
        }
    }

    /// Opens `for (long I = 0; I < N; I++) {`; its index variable. `close_loop` closes it.
    fn open_loop(&mut self, n: &str) -> String {
        let i = self.fresh("i");
        self.line(format!("for (long {i} = 0; {i} < {n}; {i}++) {{"));
        self.indent += 1;
        i
    }

    fn close_loop(&mut self) {
        self.indent -= 1;
        self.line("}");
    }

    /// The C expression of a real operand (a known real or a leaf); `None` for anything else.
    fn real_expr(v: &Val) -> Option<String> {
        match &v.av {
            Av::Real(Some(x)) => Some(real_literal(x.get())),
            Av::Real(None) => Some(v.leaves[0].clone()),
            _ => None,
        }
    }

    /// The element value of an untagged array value.
    fn untagged_elem(av: &Av) -> Option<&Av> {
        match av {
            Av::Array(t, e) if t.is_empty() => Some(e),
            _ => None,
        }
    }

    /// `(build n f)`: the length checked as the evaluator checks it, then `f` called on 0, 1,
    /// ... in order, each result stored as an element.
    pub(super) fn build(&mut self, t: &Target, a: Val, out: &Av, site: i64) -> R<Val> {
        let Some((n, f)) = self.two(&a, site)? else {
            return self.unsupported("`build` of an argument that is not a pair");
        };
        let (Some(nx), Some(e)) = (Self::real_expr(&n), Self::untagged_elem(out)) else {
            return self.unsupported("`build` whose length is not a real");
        };
        let e = e.clone();
        let layout = self.layout(&e)?;
        self.line(format!(
            "vl_check_count({site}, \"build\", \"length\", {nx});"
        ));
        let len = self.fresh("n");
        self.line(format!("long {len} = (long){nx};"));
        let arr = self.fresh("b");
        self.line(format!("V {arr} = vl_flat({len}, {});", layout.len()));
        if *t != Target::Unreachable {
            let i = self.open_loop(&len);
            let index = Val {
                av: Av::real(),
                leaves: vec![format!("(double){i}")],
            };
            let r = self.apply(t, f, index, &e, site)?;
            if r.av != Av::Bottom {
                let r = self.coerce(r, &e)?;
                let leaves = self.bind_leaves(&layout, r.leaves);
                self.flat_store(&arr, &i, &layout, &leaves);
            }
            self.close_loop();
        }
        Ok(Val {
            av: out.clone(),
            leaves: vec![arr],
        })
    }

    /// `(ifold f init n)`: the count checked, then the accumulator, in the layout of the
    /// analysis's fixpoint `out`, threaded through `f` called on 0, 1, ... in order.
    pub(super) fn ifold(&mut self, t: &Target, a: Val, out: &Av, site: i64) -> R<Val> {
        let Some((f, rest)) = self.two(&a, site)? else {
            return self.unsupported("`ifold` of an argument that is not a list");
        };
        let Some((init, n)) = self.two(&rest, site)? else {
            return self.unsupported("`ifold` of an argument that is not a list");
        };
        let Some(nx) = Self::real_expr(&n) else {
            return self.unsupported("`ifold` whose count is not a real");
        };
        self.line(format!(
            "vl_check_count({site}, \"ifold\", \"count\", {nx});"
        ));
        let layout = self.layout(out)?;
        let acc = self.temps(&layout);
        self.store(&acc, out, init)?;
        if *t != Target::Unreachable {
            // An accumulator whose boxed leaves are all pointer-free flat arrays is carried
            // from one step to the next by copying (`vl_release_carrying`): each step's other
            // allocations are reclaimed, so the loop runs in constant memory.
            let carriable = self.carriable_leaves(out)?;
            let carried: Vec<usize> = (0..layout.len())
                .filter(|&j| layout[j] == Leaf::V)
                .collect();
            let carry = !carried.is_empty() && carried.iter().all(|&j| carriable[j]);
            let mark = carry.then(|| {
                let m = self.fresh("m");
                self.line(format!("vl_mark_t {m} = vl_mark();"));
                m
            });
            let len = self.fresh("n");
            self.line(format!("long {len} = (long){nx};"));
            let i = self.open_loop(&len);
            let mut leaves = acc.clone();
            leaves.push(format!("(double){i}"));
            let arg = Val {
                av: Av::pair(out.clone(), Av::real()),
                leaves,
            };
            let r = self.apply(t, f, arg, out, site)?;
            self.store(&acc, out, r)?;
            if let Some(m) = mark {
                let c = self.fresh("c");
                let items: Vec<&str> = carried.iter().map(|&j| acc[j].as_str()).collect();
                for statement in super::release_carrying(&m, &c, &items) {
                    self.line(statement);
                }
                for (n, &j) in carried.iter().enumerate() {
                    self.line(format!("{} = {c}[{n}];", acc[j]));
                }
            }
            self.close_loop();
        }
        Ok(Val {
            av: out.clone(),
            leaves: acc,
        })
    }

    /// `(get a i)`: the index checked against the length (the evaluator's errors), then the
    /// element's leaves read in place.
    pub(super) fn get(&mut self, a: Val, site: i64) -> R<Val> {
        let Some((arr, i)) = self.two(&a, site)? else {
            return self.unsupported("`get` of an argument that is not a pair");
        };
        let Some(e) = Self::untagged_elem(&arr.av).cloned() else {
            return self.unsupported("`get` of a value that may not be an untagged array");
        };
        let Some(ix) = Self::real_expr(&i) else {
            return self.unsupported("`get` whose index is not a real");
        };
        let a = &arr.leaves[0];
        let k = self.fresh("k");
        self.line(format!("long {k} = vl_index({site}, {ix}, {a}->s[0].b);"));
        let layout = self.layout(&e)?;
        Ok(Val {
            leaves: self.flat_elem(a, &k, &layout),
            av: e,
        })
    }

    /// `(array-length a)`.
    pub(super) fn array_length(&mut self, a: Val) -> R<Val> {
        if Self::untagged_elem(&a.av).is_none() {
            return self.unsupported("`array-length` of a value that may not be an untagged array");
        }
        Ok(Val {
            av: Av::real(),
            leaves: vec![format!("(double){}->s[0].b", a.leaves[0])],
        })
    }

    /// The leaves of a constant in the layout of `to` (an array literal, or data holding
    /// some): arrays are built, the rest converted from their known values.
    pub(super) fn datum_leaves(&mut self, d: &Datum, to: &Av) -> R<Vec<String>> {
        match (d, to) {
            (Datum::Array(items), Av::Array(t, e)) if t.is_empty() => {
                let layout = self.layout(e)?;
                let arr = self.fresh("b");
                self.line(format!(
                    "V {arr} = vl_flat({}, {});",
                    items.len(),
                    layout.len()
                ));
                for (i, x) in items.iter().enumerate() {
                    let leaves = self.datum_leaves(x, e)?;
                    self.flat_store(&arr, &i.to_string(), &layout, &leaves);
                }
                Ok(vec![arr])
            }
            (Datum::Pair(p), Av::Pair(t, a, b)) if t.is_empty() => {
                let mut out = self.datum_leaves(&p.0, a)?;
                out.extend(self.datum_leaves(&p.1, b)?);
                Ok(out)
            }
            (Datum::Array(_), _) => self.unsupported("an array constant of another layout"),
            _ => self.coerce_leaves(&datum_av(d), &[], to),
        }
    }

    /// A constant holding arrays, built once at start-up into a global (flat arrays are never
    /// mutated, so every use can share it).
    pub(super) fn array_constant(&mut self, d: &Datum, tags: Tags, av: &Av) -> R<Val> {
        if !tags.is_empty() {
            return self.unsupported("AD tags on arrays");
        }
        let outer_body = std::mem::take(&mut self.body);
        let outer_indent = std::mem::replace(&mut self.indent, 1);
        let r = self.datum_leaves(d, av);
        let lines = std::mem::replace(&mut self.body, outer_body);
        self.indent = outer_indent;
        let leaves = r?;
        let layout = self.layout(av)?;
        self.constant_init.push_str(&lines);
        let mut names = Vec::new();
        for (x, l) in leaves.iter().zip(&layout) {
            let name = self.fresh("vl_a");
            let _ = writeln!(self.constant_decls, "VL_SHARED {} {name};", l.ctype());
            let _ = writeln!(self.constant_init, "  {name} = {x};");
            names.push(name);
        }
        Ok(Val {
            av: av.clone(),
            leaves: names,
        })
    }

    /// A flat array converted to another element value (a wider one: constants become
    /// leaves, parts are boxed).
    pub(super) fn coerce_array(&mut self, src: &str, from: &Av, to: &Av) -> R<Vec<String>> {
        let (from_l, to_l) = (self.layout(from)?, self.layout(to)?);
        let n = self.fresh("n");
        self.line(format!("long {n} = {src}->s[0].b;"));
        let arr = self.fresh("b");
        self.line(format!("V {arr} = vl_flat({n}, {});", to_l.len()));
        let i = self.open_loop(&n);
        let elem = self.flat_elem(src, &i, &from_l);
        let leaves = self.coerce_leaves(from, &elem, to)?;
        let leaves = self.bind_leaves(&to_l, leaves);
        self.flat_store(&arr, &i, &to_l, &leaves);
        self.close_loop();
        Ok(vec![arr])
    }

    /// A flat array boxed for printing or an error message (`VL_ARRAY`).
    pub(super) fn box_array(&mut self, src: &str, e: &Av) -> R<String> {
        if !self.for_display {
            return self.unsupported("boxing an array");
        }
        let layout = self.layout(e)?;
        let n = self.fresh("n");
        self.line(format!("long {n} = {src}->s[0].b;"));
        let b = self.fresh("b");
        self.line(format!("V {b} = vl_boxed_array({n});"));
        let i = self.open_loop(&n);
        let elem = Val {
            av: e.clone(),
            leaves: self.flat_elem(src, &i, &layout),
        };
        let x = self.boxed_val(&elem)?;
        self.line(format!("{b}->s[1 + {i}].v = {x};"));
        self.close_loop();
        Ok(b)
    }
}
