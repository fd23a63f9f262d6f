//! Arrays (paper 002): `build` (and its forward version), `ifold`, `get`, `array-length`, array
//! literals and the AD operators on arrays, compiled to loops over *flat* arrays.
//!
//! The analysis gives an array one abstract element value (`Av::Array(tags, len, e)`), so every
//! element has the same layout: the array is one `V` leaf pointing to a runtime object whose
//! slot 0 is the length and whose element `i` is `k` slots at `1 + i*k ...` (`vl_flat`).
//!
//! The `k` slots are the layout of the element value's *shape* (`Av::shape`: its known reals
//! and booleans made unknown), and known parts are stored too (`slots`). So two element values
//! of one shape have one flat layout, and converting an array from one to the other (an array
//! whose elements have a known zero tangent passed where the tangents are unknown) keeps the
//! same array: a copy there, at a call inside a loop over the elements (forward `get`), made
//! such loops quadratic. An array of reals is a length and a row of doubles. Flat arrays are
//! never mutated after they are built, so a literal is built once, at start-up, like a boxed
//! constant.
//!
//! An array is boxed to be printed or described in an error, and where it becomes part of a
//! boxed value (an element of a list whose length is known only at run time, the environment
//! of a boxed backpropagator). Boxing is by reference, O(1) (`vl_flatref`): its elements are
//! boxed when read, by a function generated for the element layout (`elem_boxer`). `get` and
//! `array-length` of a boxed value, and the runtime's AD operators, take boxed arrays; a boxed
//! array is never unboxed (the analysis keeps anything that was boxed boxed).
//!
//! **Reverse mode.** The sensitivity of a reverse `get` is a lazy one-hot runtime object
//! (`onehot`), and the reverse `build`'s list is turned into an array and back by the
//! runtime where its length is unknown (`list_to_array_rev`, `array_to_list_rev`).
//!
//! **AD tags.** A tagged array is tagged structurally (its element value carries the tags), so
//! it has the same flat layout. The AD operators map it element by element (`map_flat`,
//! `zip_flat`): a new flat array whose element `i` is the operator's image of element `i`, or
//! the same array where the image of every element has the element's own leaves (`*j` or
//! `perturb` of an array of reals costs nothing). `bundle` and `plus` check the lengths with the
//! evaluator's message.

use super::{real_literal, Gen, Leaf, Val, R};
use std::fmt::Write as _;
use vlad_core::{Datum, Tags};
use vlad_flow::analysis::datum_av;
use vlad_flow::{Av, Target};

impl Gen<'_, '_> {
    /// For each slot of an element of value `e` in a flat array (the layout of `e.shape()`):
    /// the C literal it holds where `e` knows it, `None` where it holds one of `e`'s leaves.
    fn slots(&self, e: &Av, out: &mut Vec<Option<String>>) -> R<()> {
        match e {
            Av::Real(Some(x)) => out.push(Some(real_literal(x.get()))),
            Av::Bool(Some(b)) => out.push(Some((*b as u8).to_string())),
            Av::Real(None) | Av::Bool(None) | Av::Array(..) | Av::Dyn(_) => out.push(None),
            Av::Bottom | Av::Nil | Av::Prim(_) => {}
            Av::Pair(_, a, b) | Av::Bundle(a, b) => {
                self.slots(a, out)?;
                self.slots(b, out)?;
            }
            Av::Closure(_, env) => {
                for x in env.iter() {
                    self.slots(x, out)?;
                }
            }
            Av::Tagged(_, x) => self.slots(x, out)?,
            // A lazy zero holds the leaves of the reverse value it is the zero of, unless its
            // zero is known (`visit_leaves`): then it has slots only if its shape's zero is
            // not known (known booleans, whose zero is themselves), and its reals are
            // placeholders there.
            Av::Zero(of) if super::static_zero(&of.shape()) => {}
            Av::Zero(of) if super::static_zero(of) => {
                let mut inner = Vec::new();
                self.slots(of, &mut inner)?;
                let layout = self.layout(&of.shape())?;
                out.extend(inner.into_iter().zip(layout).map(|(x, l)| match x {
                    None => Some(l.dummy().to_string()),
                    known => known,
                }));
            }
            Av::Zero(of) => self.slots(of, out)?,
        }
        Ok(())
    }

    /// The slots of an element of value `e` and their layout.
    fn elem_slots(&self, e: &Av) -> R<(Vec<Option<String>>, Vec<Leaf>)> {
        let mut slots = Vec::new();
        self.slots(e, &mut slots)?;
        let layout = self.layout(&e.shape())?;
        if slots.len() != layout.len() {
            if std::env::var_os("VLAD_C_DEBUG").is_some() {
                eprintln!("slots of {e:?}: {slots:?}\n  shape layout {layout:?}");
            }
            return self.unsupported("internal: an array element's slots");
        }
        Ok((slots, layout))
    }

    /// The number of slots of an element of value `e`.
    fn elem_width(&self, e: &Av) -> R<usize> {
        Ok(self.layout(&e.shape())?.len())
    }

    /// The C expressions of the leaves of element `index`, of value `e`, of flat array `arr`.
    fn flat_elem(&self, arr: &str, index: &str, e: &Av) -> R<Vec<String>> {
        let (slots, layout) = self.elem_slots(e)?;
        let k = layout.len();
        Ok(slots
            .iter()
            .zip(&layout)
            .enumerate()
            .filter(|(_, (x, _))| x.is_none())
            .map(|(j, (_, l))| format!("{arr}->s[1 + {index} * {k} + {j}].{}", l.slot()))
            .collect())
    }

    /// Stores `leaves`, the leaves of a value `e`, as element `index` of flat array `arr`.
    fn flat_store(&mut self, arr: &str, index: &str, e: &Av, leaves: &[String]) -> R<()> {
        let (slots, layout) = self.elem_slots(e)?;
        let k = layout.len();
        let mut leaves = leaves.iter();
        for (j, (x, l)) in slots.iter().zip(&layout).enumerate() {
            let x = match x {
                Some(known) => known,
                None => match leaves.next() {
                    Some(leaf) => leaf,
                    None => return self.unsupported("internal: an array element's leaves"),
                },
            };
            self.line(format!(
                "{arr}->s[1 + {index} * {k} + {j}].{} = {x};",
                l.slot()
            ));
        }
        Ok(())
    }

    /// Opens `for (long I = 0; I < N; I++) {`; its index variable. `close_block` closes it.
    fn open_loop(&mut self, n: &str) -> String {
        let i = self.fresh("i");
        self.line(format!("for (long {i} = 0; {i} < {n}; {i}++) {{"));
        self.indent += 1;
        i
    }

    /// Closes the block `open_loop` (or an `if (...) {` line with its indent) opened.
    fn close_block(&mut self) {
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
            Av::Array(t, _, e) if t.is_empty() => Some(e),
            _ => None,
        }
    }

    /// The element value of an array value, whatever its tags.
    fn array_elem(av: &Av) -> Option<&Av> {
        match av {
            Av::Array(_, _, e) => Some(e),
            _ => None,
        }
    }

    /// The flat array of `to` elements whose element `i` has the leaves `f` gives for element
    /// `i` of the flat array `src` (of `from` elements). Where `f` gives every element its own
    /// leaves, in the same layout and without code, the result is `src` itself.
    pub(super) fn map_flat(
        &mut self,
        src: &str,
        from: &Av,
        to: &Av,
        mut f: impl FnMut(&mut Self, Val) -> R<Vec<String>>,
    ) -> R<String> {
        // The same array where the elements' slots hold the same values: the same known
        // parts, and `f` giving each element its own leaves, without code.
        if self.elem_slots(from)? == self.elem_slots(to)? {
            let n = self.layout(from)?.len();
            let probe: Vec<String> = (0..n).map(|j| format!("vl_probe{j}")).collect();
            let outer = std::mem::take(&mut self.body);
            let r = f(
                self,
                Val {
                    av: from.clone(),
                    leaves: probe.clone(),
                },
            );
            let code = std::mem::replace(&mut self.body, outer);
            if r? == probe && code.is_empty() {
                return Ok(src.to_string());
            }
        }
        let n = self.fresh("n");
        self.line(format!("long {n} = {src}->s[0].b;"));
        self.flat_loop(&n, to, |s, i| {
            let elem = Val {
                av: from.clone(),
                leaves: s.flat_elem(src, i, from)?,
            };
            f(s, elem)
        })
    }

    /// A new flat array of `n` elements of value `to`, element `i` the leaves `elem` gives
    /// (its code in a C loop over `i`).
    fn flat_loop(
        &mut self,
        n: &str,
        to: &Av,
        elem: impl FnOnce(&mut Self, &str) -> R<Vec<String>>,
    ) -> R<String> {
        let to_l = self.layout(to)?;
        let arr = self.fresh("b");
        self.line(format!("V {arr} = vl_flat({n}, {});", self.elem_width(to)?));
        let i = self.open_loop(n);
        let leaves = elem(self, &i)?;
        if leaves.len() != to_l.len() {
            return self.unsupported("internal: an array map gives another layout");
        }
        let leaves = self.bind_leaves(&to_l, leaves);
        self.flat_store(&arr, &i, to, &leaves)?;
        self.close_block();
        Ok(arr)
    }

    /// The flat array of `to` elements whose element `i` has the leaves `f` gives for elements
    /// `i` of `x` and `y`, after checking that their lengths agree (the evaluator's error,
    /// naming the operator `op`).
    pub(super) fn zip_flat(
        &mut self,
        op: &str,
        x: &Val,
        y: &Val,
        to: &Av,
        mut f: impl FnMut(&mut Self, Val, Val) -> R<Vec<String>>,
    ) -> R<String> {
        let (Some(xe), Some(ye)) = (Self::array_elem(&x.av), Self::array_elem(&y.av)) else {
            return self.unsupported("internal: a point-wise map of a non-array");
        };
        let (xa, ya) = (&x.leaves[0], &y.leaves[0]);
        let n = self.fresh("n");
        self.line(format!("long {n} = {xa}->s[0].b;"));
        self.line(format!(
            "if ({ya}->s[0].b != {n}) vl_length_fail({}, {n}, {ya}->s[0].b);",
            super::c_string(op)
        ));
        self.flat_loop(&n, to, |s, i| {
            let a = Val {
                av: xe.clone(),
                leaves: s.flat_elem(xa, i, xe)?,
            };
            let b = Val {
                av: ye.clone(),
                leaves: s.flat_elem(ya, i, ye)?,
            };
            f(s, a, b)
        })
    }

    /// The image of an element value under the AD map `kind`.
    pub(super) fn map_image(&mut self, kind: super::MapKind, e: &Av) -> R<Av> {
        match kind.prim() {
            Some(p) => self.elem_image(p, e.clone()),
            None => self.unsupported(format!("internal: the map {kind:?} of an array")),
        }
    }

    /// The image under the primitive `p` of an element value (or of the pair of two).
    pub(super) fn elem_image(&mut self, p: vlad_core::Prim, a: Av) -> R<Av> {
        let r = self.prim_result(p, &a)?;
        // An array whose element value is no value has no elements (`(build 0 f)`, or its
        // lazy zero): its image has none either. (For `bundle` and `plus`, the two lengths
        // are still checked.)
        if r == Av::Bottom && !no_value(&a) {
            if std::env::var_os("VLAD_C_DEBUG").is_some() {
                eprintln!("`{}` of the array element {a:?} fails", p.name());
            }
            return self.unsupported(format!(
                "internal: `{}` of an array element fails",
                p.name()
            ));
        }
        Ok(r)
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
        self.line(format!(
            "vl_check_count({site}, \"build\", \"length\", {nx});"
        ));
        let e = e.clone();
        self.build_loop(t, &nx, f, Av::real(), &e, out, site)
    }

    /// The forward version of `build` (`Target::ForwardBuild`), at the forward tags `t` of
    /// its argument: the length is a forward real (checked on its innermost primal, described
    /// whole in the error), and each index is the index lifted to `t`, whose tangents are
    /// known zeros, so it has one leaf.
    pub(super) fn forward_build(&mut self, t: &Target, a: Val, out: &Av, site: i64) -> R<Val> {
        let Av::Pair(tags, n, f) = &a.av else {
            return self.unsupported("a forward `build` of an argument that is not a pair");
        };
        let tags = *tags;
        let mut parts = self.parts(&a, &[n, f])?;
        let f = parts.pop().expect("two parts");
        let n = parts.pop().expect("two parts");
        let Some(e) = Self::array_elem(out).cloned() else {
            return self.unsupported("a forward `build` that does not give an array");
        };
        let mut primal = n.clone();
        for _ in 0..tags.depth() {
            let Av::Bundle(p, d) = &primal.av else {
                return self.unsupported("a forward `build` whose length is not a forward real");
            };
            let leaves = self.split(&[p, d], &primal.leaves)?.swap_remove(0);
            primal = Val {
                av: (**p).clone(),
                leaves,
            };
        }
        let Some(nx) = Self::real_expr(&primal) else {
            return self.unsupported("a forward `build` whose length is not a forward real");
        };
        self.line(format!("if (!vl_count_ok({nx})) {{"));
        self.indent += 1;
        let b = self.boxed_for_display(&n)?;
        self.line(format!(
            "vl_count_fail({site}, \"build\", \"length\", {nx}, {b});"
        ));
        self.close_block();
        let index = self
            .an
            .lift_av(Av::real(), tags)
            .map_err(super::flow_error)?;
        if self.layout(&index)? != [super::Leaf::D] {
            return self.unsupported("internal: a forward index of another layout");
        }
        self.build_loop(t, &nx, f, index, &e, out, site)
    }

    /// The loop of a `build` whose length `nx` was checked: element `i` is `f` applied to
    /// the index, a value of `index_av` whose one leaf is `i`.
    #[allow(clippy::too_many_arguments)]
    fn build_loop(
        &mut self,
        t: &Target,
        nx: &str,
        f: Val,
        index_av: Av,
        e: &Av,
        out: &Av,
        site: i64,
    ) -> R<Val> {
        let layout = self.layout(e)?;
        let len = self.fresh("n");
        self.line(format!("long {len} = (long){nx};"));
        let arr = self.fresh("b");
        self.line(format!(
            "V {arr} = vl_flat({len}, {});",
            self.elem_width(e)?
        ));
        if *t != Target::Unreachable {
            let i = self.open_loop(&len);
            let index = Val {
                av: index_av,
                leaves: vec![format!("(double){i}")],
            };
            let r = self.apply(t, f, index, e, site)?;
            if r.av != Av::Bottom {
                let r = self.coerce(r, e)?;
                let leaves = self.bind_leaves(&layout, r.leaves);
                self.flat_store(&arr, &i, e, &leaves)?;
            }
            self.close_block();
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
            self.close_block();
        }
        Ok(Val {
            av: out.clone(),
            leaves: acc,
        })
    }

    /// `(get a i)`: the index checked against the length (the evaluator's errors), then the
    /// element's leaves read in place. A boxed array, or an index that may not be a real (a
    /// boxed value), is checked at run time, the array first, as the evaluator checks them.
    pub(super) fn get(&mut self, a: Val, out: &Av, site: i64) -> R<Val> {
        let Some((arr, i)) = self.two(&a, site)? else {
            return self.unsupported("`get` of an argument that is not a pair");
        };
        if let Av::Dyn(_) = arr.av {
            let call = match Self::real_expr(&i) {
                Some(ix) => format!("vl_boxed_get({site}, {}, {ix})", arr.leaves[0]),
                None => {
                    let b = self.boxed_for_display(&i)?;
                    format!("vl_boxed_get_v({site}, {}, {b})", arr.leaves[0])
                }
            };
            let t = self.runtime_v(call);
            return match out {
                Av::Dyn(_) => Ok(Val {
                    av: out.clone(),
                    leaves: vec![t],
                }),
                // The call fails (the runtime reports it): no value.
                Av::Bottom => Ok(Val::known(Av::Bottom)),
                _ => self.unsupported("internal: `get` of a boxed value that is not boxed"),
            };
        }
        let Some(e) = Self::array_elem(&arr.av).cloned() else {
            return self.not_an_array(&arr, "get", site);
        };
        let ix = self.index_expr(&i, site)?;
        let a = &arr.leaves[0];
        let k = self.fresh("k");
        self.line(format!("long {k} = vl_index({site}, {ix}, {a}->s[0].b);"));
        Ok(Val {
            leaves: self.flat_elem(a, &k, &e)?,
            av: e,
        })
    }

    /// An index as a C `double`: a real, or any other value checked at run time
    /// (`vl_index_real`: the evaluator's error where it is not a real).
    fn index_expr(&mut self, i: &Val, site: i64) -> R<String> {
        Ok(match Self::real_expr(i) {
            Some(ix) => ix,
            None => {
                let b = self.boxed_for_display(i)?;
                format!("vl_index_real({site}, {b})")
            }
        })
    }

    /// `get` or `array-length` (`op`) of a value that is not an array (the analysis knows it:
    /// neither an array nor boxed): the evaluator's error, where the code is reached.
    fn not_an_array(&mut self, a: &Val, op: &str, site: i64) -> R<Val> {
        let b = self.boxed_for_display(a)?;
        self.line(format!(
            "vl_not_array({site}, {}, {b});",
            super::c_string(op)
        ));
        Ok(Val::known(Av::Bottom))
    }

    /// `(array-length a)`.
    pub(super) fn array_length(&mut self, a: Val, site: i64) -> R<Val> {
        if let Av::Dyn(_) = a.av {
            return Ok(Val {
                av: Av::real(),
                leaves: vec![format!("vl_boxed_length({site}, {})", a.leaves[0])],
            });
        }
        if Self::array_elem(&a.av).is_none() {
            return self.not_an_array(&a, "array-length", site);
        }
        Ok(Val {
            av: Av::real(),
            leaves: vec![format!("(double){}->s[0].b", a.leaves[0])],
        })
    }

    /// The leaves of a constant in the layout of `to` (an array literal, or data holding
    /// some), lifted through the AD tags `tags` (a literal in transformed code): arrays are
    /// built, the rest converted from their known values.
    pub(super) fn datum_leaves(&mut self, d: &Datum, tags: Tags, to: &Av) -> R<Vec<String>> {
        match (d, to) {
            (Datum::Array(items), Av::Array(t, _, e)) if *t == tags => {
                let arr = self.fresh("b");
                self.line(format!(
                    "V {arr} = vl_flat({}, {});",
                    items.len(),
                    self.elem_width(e)?
                ));
                for (i, x) in items.iter().enumerate() {
                    let leaves = self.datum_leaves(x, tags, e)?;
                    self.flat_store(&arr, &i.to_string(), e, &leaves)?;
                }
                Ok(vec![arr])
            }
            (Datum::Pair(p), Av::Pair(t, a, b)) if *t == tags => {
                let mut out = self.datum_leaves(&p.0, tags, a)?;
                out.extend(self.datum_leaves(&p.1, tags, b)?);
                Ok(out)
            }
            // An array among data of other shapes (`#(1 #(2))`, an element boxed): built in
            // its own layout, then converted.
            (Datum::Array(_), _) => {
                let own = self
                    .an
                    .lift_av(datum_av(d), tags)
                    .map_err(super::flow_error)?;
                if !matches!(own, Av::Array(..)) {
                    return self.unsupported("an array constant of another layout");
                }
                let leaves = self.datum_leaves(d, tags, &own)?;
                self.coerce_leaves(&own, &leaves, to)
            }
            _ => {
                let av = self
                    .an
                    .lift_av(datum_av(d), tags)
                    .map_err(super::flow_error)?;
                self.coerce_leaves(&av, &[], to)
            }
        }
    }

    /// A constant holding arrays, built once at start-up into a global (flat arrays are never
    /// mutated, so every use can share it).
    pub(super) fn array_constant(&mut self, d: &Datum, tags: Tags, av: &Av) -> R<Val> {
        let (r, lines) = self.detached(|s| s.datum_leaves(d, tags, av));
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
    /// leaves, parts are boxed). Where the two have one shape, and every slot `to` knows
    /// holds that value in `from`'s elements too, it is the same array.
    pub(super) fn coerce_array(&mut self, src: &str, from: &Av, to: &Av) -> R<Vec<String>> {
        if from.shape() == to.shape() {
            let (a, _) = self.elem_slots(from)?;
            let (b, _) = self.elem_slots(to)?;
            if a.iter().zip(&b).all(|(x, y)| y.is_none() || x == y) {
                return Ok(vec![src.to_string()]);
            }
        }
        let arr = self.map_flat(src, from, to, |s, e| s.coerce_leaves(from, &e.leaves, to))?;
        Ok(vec![arr])
    }

    /// A flat array boxed, for printing or an error message, or as part of a boxed value: by
    /// reference (`vl_flatref`, O(1)), its elements boxed when they are read, by the boxer
    /// generated for its element layout (`elem_boxer`).
    pub(super) fn box_array(&mut self, src: &str, tags: Tags, e: &Av) -> R<String> {
        let key = (e.clone(), self.for_display);
        let n = match self.elem_boxer_ids.get(&key) {
            Some(n) => *n,
            None => {
                let n = self.elem_boxers.len();
                self.elem_boxers.push(key.clone());
                self.elem_boxer_ids.insert(key, n);
                n
            }
        };
        Ok(self.runtime_v(format!("vl_flatref({src}, {}u, {n})", tags.bits())))
    }

    /// The definition of `vl_box_elem_N`, which boxes element `i` of a flat array `a` of the
    /// element layout `N` of `elem_boxers`.
    pub(super) fn elem_boxer(&mut self, n: usize) -> R<String> {
        let (e, display) = self.elem_boxers[n].clone();
        let key = std::mem::replace(&mut self.key, usize::MAX);
        let outer_display = std::mem::replace(&mut self.for_display, display);
        let (r, body) = self.detached(|s| {
            let leaves = s.flat_elem("a", "i", &e)?;
            let x = s.boxed_val(&Val { av: e, leaves })?;
            s.line(format!("return {x};"));
            Ok(())
        });
        self.key = key;
        self.for_display = outer_display;
        r?;
        Ok(format!(
            "static V vl_box_elem_{n}(V a, long i) {{\n  (void)a;\n  (void)i;\n{body}}}\n\n"
        ))
    }
}

/// Reverse mode through arrays: the three internal primitives of the reverse `get` and `build`
/// (vlad-eval/src/ad.rs, `REVERSE_PRELUDE` and `ARRAY_DEFINITIONS`).
impl Gen<'_, '_> {
    /// `(%onehot-sensitivity a k s)`: the sensitivity of the reverse array `a` that is `s` at
    /// index `k` (already checked by the `get` it is the backpropagator of). It stays lazy in
    /// the runtime (`vl_onehot`, O(1)), as in the evaluator, so the analysis boxes it. Where
    /// the zero of `a`'s elements is known, the node holds that zero (a constant) and only
    /// the length of `a`; otherwise it holds `a` boxed (by reference, also O(1)), to take
    /// each element's zero from when it is made dense.
    pub(super) fn onehot(&mut self, a: Val, out: &Av) -> R<Val> {
        if *out == Av::Bottom {
            return Ok(Val::known(Av::Bottom));
        }
        let Av::Dyn(_) = out else {
            return self.unsupported("internal: a one-hot sensitivity that is not boxed");
        };
        let Some((arr, rest)) = self.two(&a, -1)? else {
            return self.unsupported("internal: `%onehot-sensitivity` of a non-pair");
        };
        let Some((k, s)) = self.two_raw(&rest, -1)? else {
            return self.unsupported("internal: `%onehot-sensitivity` of a non-pair");
        };
        // The index `get` checked (a boxed one is a real too).
        let ix = self.index_expr(&k, -1)?;
        let s = self.boxed_val(&s)?;
        self.map_kinds.insert(super::MapKind::ZeroSensitivity);
        let call = match &arr.av {
            Av::Dyn(_) => format!("vl_onehot({}, 0, 0u, 0, (long)({ix}), {s})", arr.leaves[0]),
            Av::Array(t, _, e) if super::static_zero(e) => {
                let zero = self.boxed_val(&Val {
                    av: Av::Zero(std::rc::Rc::new((**e).clone())),
                    leaves: Vec::new(),
                })?;
                format!(
                    "vl_onehot(0, {}->s[0].b, {}u, {zero}, (long)({ix}), {s})",
                    arr.leaves[0],
                    t.bits()
                )
            }
            Av::Array(t, _, e) => {
                let b = self.box_array(&arr.leaves[0], *t, e)?;
                format!("vl_onehot({b}, 0, 0u, 0, (long)({ix}), {s})")
            }
            _ => return self.unsupported("internal: a one-hot sensitivity of a non-array"),
        };
        Ok(Val {
            av: out.clone(),
            leaves: vec![self.runtime_v(call)],
        })
    }

    /// `(%list->array-rev l)`: the list `build`'s loop accumulated, last element first, as an
    /// array with the list's tags. A list of unknown length is boxed; its elements are then
    /// boxed too (the analysis joined them with the boxed tail), one slot each.
    pub(super) fn list_to_array_rev(&mut self, l: Val, out: &Av) -> R<Val> {
        // Boxed by the runtime: a boxed array (`flat` 0), or a flat one of boxed elements.
        let flat = match out {
            Av::Dyn(_) => Some(0),
            Av::Array(_, _, e) if matches!(**e, Av::Dyn(_)) => Some(1),
            _ => None,
        };
        if let Some(flat) = flat {
            let b = self.boxed_val(&l)?;
            return Ok(Val {
                av: out.clone(),
                leaves: vec![self.runtime_v(format!("vl_list_to_array_rev({b}, {flat})"))],
            });
        }
        let e = match out {
            Av::Bottom => return Ok(Val::known(Av::Bottom)),
            Av::Array(_, _, e) => (**e).clone(),
            _ => return self.unsupported("internal: `%list->array-rev` that is not an array"),
        };
        // A list of known length: its elements are stored in place, last first.
        let mut items = Vec::new();
        let mut cur = self.force(l)?;
        let tags = match &cur.av {
            Av::Pair(t, ..) => *t,
            _ => vlad_core::Tags::EMPTY,
        };
        while let Av::Pair(t, x, y) = cur.av.clone() {
            if t != tags {
                break;
            }
            let mut ps = self.parts(&cur, &[&x, &y])?;
            cur = ps.pop().expect("two parts");
            items.push(ps.pop().expect("two parts"));
            cur = self.force(cur)?;
        }
        if let Av::Dyn(_) = cur.av {
            return self.unsupported("internal: a list of unknown length with unboxed elements");
        }
        let arr = self.fresh("b");
        self.line(format!(
            "V {arr} = vl_flat({}, {});",
            items.len(),
            self.elem_width(&e)?
        ));
        let n = items.len();
        for (j, x) in items.into_iter().enumerate() {
            let leaves = self.coerce_leaves(&x.av, &x.leaves, &e)?;
            self.flat_store(&arr, &(n - 1 - j).to_string(), &e, &leaves)?;
        }
        Ok(Val {
            av: out.clone(),
            leaves: vec![arr],
        })
    }

    /// `(%array->list-rev a)`: the sensitivity of an array made by `build` as the sensitivity
    /// of the list its loop accumulated (boxed).
    pub(super) fn array_to_list_rev(&mut self, a: Val, out: &Av, site: i64) -> R<Val> {
        if *out == Av::Bottom {
            // Not an array: the runtime reports the evaluator's error.
            let b = self.boxed_for_display(&a)?;
            self.line(format!("vl_array_to_list_rev({site}, {b});"));
            return Ok(Val::known(Av::Bottom));
        }
        let Av::Dyn(_) = out else {
            return self.unsupported("internal: `%array->list-rev` that is not boxed");
        };
        let b = self.boxed_val(&a)?;
        Ok(Val {
            av: out.clone(),
            leaves: vec![self.runtime_v(format!("vl_array_to_list_rev({site}, {b})"))],
        })
    }
}

/// Does `a` describe no value at all: no value, or an aggregate with a part of no value (an
/// array of no elements is a value).
fn no_value(a: &Av) -> bool {
    match a {
        Av::Bottom => true,
        Av::Pair(_, x, y) | Av::Bundle(x, y) => no_value(x) || no_value(y),
        Av::Tagged(_, x) | Av::Zero(x) => no_value(x),
        Av::Closure(_, env) => env.iter().any(no_value),
        _ => false,
    }
}
