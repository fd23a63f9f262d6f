//! Arrays (paper 002): `build` (and its forward version), `ifold`, `get`, `array-length`, array
//! literals and the AD operators on arrays, lowered to the IR's `build` and `ifold` loops over
//! *flat* arrays.
//!
//! The analysis gives an array one abstract element value (`Av::Array(tags, len, e)`), so every
//! element has the same layout: the array is one leaf, a flat runtime array whose elements each
//! hold the slots of that layout in a row (`Ty::Array`).
//!
//! The slots are the layout of the element value's *shape* (`Av::shape`: its known reals and
//! booleans made unknown), and known parts are stored too (`slots`). So two element values of
//! one shape have one flat layout, and converting an array from one to the other (an array
//! whose elements have a known zero tangent passed where the tangents are unknown) keeps the
//! same array: a copy there, at a call inside a loop over the elements (forward `get`), made
//! such loops quadratic. Flat arrays are never mutated after they are built, so a literal is
//! built once, at start-up, like a boxed constant.
//!
//! An array is boxed to be printed or described in an error, and where it becomes part of a
//! boxed value. Boxing is by reference, O(1) (`vl_flatref`): its elements are boxed when read,
//! by a function lowered for the element layout (`elem_boxer`). `get` and `array-length` of a
//! boxed value, and the runtime's AD operators, take boxed arrays; a boxed array is never
//! unboxed (the analysis keeps anything that was boxed boxed).
//!
//! **Reverse mode.** The sensitivity of a reverse `get` is a lazy one-hot runtime object
//! (`onehot`), and the reverse `build`'s list is turned into an array and back by the runtime
//! where its length is unknown (`list_to_array_rev`, `array_to_list_rev`).
//!
//! **AD tags.** A tagged array is tagged structurally (its element value carries the tags), so
//! it has the same flat layout. The AD operators map it element by element (`map_flat`,
//! `zip_flat`): a new flat array whose element `i` is the operator's image of element `i`, or
//! the same array where the image of every element has the element's own leaves (`*j` or
//! `perturb` of an array of reals costs nothing). `bundle` and `plus` check the lengths with the
//! evaluator's message.

use super::{flow_error, layout::static_zero, Cond, Lowerer, Val, R};
use std::rc::Rc;
use vlad_core::{Datum, Tags};
use vlad_flow::analysis::datum_av;
use vlad_flow::{Av, Target};
use vlad_ir::{BinOp, FuncKind, Op, Operand, Rt, Stmt, Ty, UnOp};

/// Two slots hold the same known value (reals compared by their bits: `-0` is not `0`).
fn same_slot(a: &Option<Operand>, b: &Option<Operand>) -> bool {
    match (a, b) {
        (Some(Operand::F64(x)), Some(Operand::F64(y))) => x.to_bits() == y.to_bits(),
        _ => a == b,
    }
}

fn same_slots(a: &[Option<Operand>], b: &[Option<Operand>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_slot(x, y))
}

impl Lowerer<'_, '_> {
    /// For each slot of an element of value `e` in a flat array (the layout of `e.shape()`):
    /// the constant it holds where `e` knows it, `None` where it holds one of `e`'s leaves.
    fn slots(&self, e: &Av, out: &mut Vec<Option<Operand>>) -> R<()> {
        match e {
            Av::Real(Some(x)) => out.push(Some(Operand::F64(x.get()))),
            Av::Bool(Some(b)) => out.push(Some(Operand::Bool(*b))),
            Av::Real(None) | Av::Bool(None) | Av::Dyn(_) => out.push(None),
            // An array is a pointer, a forward one two or more (`soa.rs`).
            Av::Array(..) => {
                for _ in self.layout(e)? {
                    out.push(None);
                }
            }
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
            Av::Zero(of) if static_zero(&of.shape()) => {}
            Av::Zero(of) if static_zero(of) => {
                let mut inner = Vec::new();
                self.slots(of, &mut inner)?;
                let layout = self.layout(&of.shape())?;
                out.extend(inner.into_iter().zip(layout).map(|(x, t)| match x {
                    None => Some(Operand::placeholder(&t)),
                    known => known,
                }));
            }
            Av::Zero(of) => self.slots(of, out)?,
            Av::OrZero(of, x) => {
                out.push(None);
                self.slots(&Av::Zero(of.clone()), out)?;
                self.slots(x, out)?;
            }
            Av::OneHot(of, x) => {
                self.slots(of, out)?;
                out.push(None);
                self.slots(x, out)?;
            }
            Av::Sum(o, d) => {
                self.slots(o, out)?;
                self.slots(d, out)?;
            }
        }
        Ok(())
    }

    /// The slots of an element of value `e` and their layout.
    fn elem_slots(&self, e: &Av) -> R<(Vec<Option<Operand>>, Vec<Ty>)> {
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

    /// The flat array type of arrays of `e` elements.
    pub(crate) fn array_ty(&self, e: &Av) -> R<Ty> {
        Ok(Ty::Array(self.layout(&e.shape())?.into()))
    }

    /// The leaves of element `index`, of value `e`, of flat array `arr`.
    pub(crate) fn flat_elem(&mut self, arr: &Operand, index: &Operand, e: &Av) -> R<Vec<Operand>> {
        let (slots, layout) = self.elem_slots(e)?;
        let mut out = Vec::new();
        for (j, (x, ty)) in slots.iter().zip(layout).enumerate() {
            if x.is_none() {
                out.push(self.let1(
                    ty,
                    Op::Load {
                        array: arr.clone(),
                        index: index.clone(),
                        slot: j as u32,
                    },
                ));
            }
        }
        Ok(out)
    }

    /// The slots stored for an element of value `e` whose leaves are `leaves`.
    pub(crate) fn elem_operands(&self, e: &Av, leaves: Vec<Operand>) -> R<Vec<Operand>> {
        let (slots, _) = self.elem_slots(e)?;
        let mut leaves = leaves.into_iter();
        let mut out = Vec::with_capacity(slots.len());
        for x in slots {
            out.push(match x {
                Some(known) => known,
                None => match leaves.next() {
                    Some(leaf) => leaf,
                    None => return self.unsupported("internal: an array element's leaves"),
                },
            });
        }
        Ok(out)
    }

    /// Stores `leaves`, the leaves of a value `e`, as element `index` of flat array `arr`.
    fn flat_store(&mut self, arr: &Operand, index: i64, e: &Av, leaves: Vec<Operand>) -> R<()> {
        let slots = self.elem_operands(e, leaves)?;
        self.store_slots(arr, index, slots);
        Ok(())
    }

    /// Stores the slots of element `index` of flat array `arr`.
    fn store_slots(&mut self, arr: &Operand, index: i64, slots: Vec<Operand>) {
        for (j, value) in slots.into_iter().enumerate() {
            self.b.push(Stmt::Store {
                array: arr.clone(),
                index: Operand::I64(index),
                slot: j as u32,
                value,
            });
        }
    }

    /// A real operand (a known real or a leaf); `None` for anything else.
    fn real_expr(v: &Val) -> Option<Operand> {
        match &v.av {
            Av::Real(Some(x)) => Some(Operand::F64(x.get())),
            Av::Real(None) => Some(v.leaves[0].clone()),
            _ => None,
        }
    }

    /// The count of `build` or `ifold` (`op`, `what`) as a real operand, checked as the
    /// evaluator checks it: a real, or a boxed value whose innermost primal is one (a loop of
    /// reverse mode inside another, whose count the analysis joined with values of other
    /// tags); `None` for anything else.
    fn checked_count(&mut self, n: &Val, site: i64, op: &str, what: &str) -> Option<Operand> {
        let args = |x: Operand| {
            vec![
                Operand::I64(site),
                Operand::Str(op.into()),
                Operand::Str(what.into()),
                x,
            ]
        };
        if let Av::Dyn(_) = n.av {
            return Some(self.rt(Ty::F64, Rt::BoxedCount, args(n.leaves[0].clone())));
        }
        let nx = Self::real_expr(n)?;
        self.rt_effect(Rt::CheckCount, args(nx.clone()));
        Some(nx)
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
    pub(crate) fn map_flat(
        &mut self,
        src: &Operand,
        from: &Av,
        to: &Av,
        mut f: impl FnMut(&mut Self, Val) -> R<Vec<Operand>>,
    ) -> R<Operand> {
        // The same array where the elements' slots hold the same values: the same known
        // parts, and `f` giving each element its own leaves, without code.
        if same_slots(&self.elem_slots(from)?.0, &self.elem_slots(to)?.0) {
            let probe: Vec<Operand> = self
                .layout(from)?
                .into_iter()
                .map(|ty| Operand::Var(self.b.var(ty, "probe")))
                .collect();
            let (r, code) = self.block(|s| {
                f(
                    s,
                    Val {
                        av: from.clone(),
                        leaves: probe.clone(),
                    },
                )
            })?;
            if r == probe && code.is_empty() {
                return Ok(src.clone());
            }
        }
        let n = self.let1(Ty::I64, Op::Length(src.clone()));
        self.flat_loop(&n, to, |s, i| {
            let leaves = s.flat_elem(src, i, from)?;
            f(
                s,
                Val {
                    av: from.clone(),
                    leaves,
                },
            )
        })
    }

    /// A new flat array of `n` elements of value `to`, element `i` the leaves `elem` gives (a
    /// `build` over `i`).
    pub(crate) fn flat_loop(
        &mut self,
        n: &Operand,
        to: &Av,
        elem: impl FnOnce(&mut Self, &Operand) -> R<Vec<Operand>>,
    ) -> R<Operand> {
        let to_l = self.layout(to)?;
        let ty = self.array_ty(to)?;
        let Ty::Array(slots) = ty.clone() else {
            unreachable!("an array type")
        };
        let array = self.b.var(ty, "b");
        let index = self.b.var(Ty::I64, "i");
        let (elem, body) = self.block(|s| {
            let leaves = elem(s, &Operand::Var(index))?;
            if leaves.len() != to_l.len() {
                return s.unsupported("internal: an array map gives another layout");
            }
            s.elem_operands(to, leaves)
        })?;
        self.b.push(Stmt::Build {
            array,
            layout: slots,
            count: n.clone(),
            index,
            body,
            elem,
        });
        Ok(Operand::Var(array))
    }

    /// The flat array of `to` elements whose element `i` has the leaves `f` gives for elements
    /// `i` of `x` and `y`, after checking that their lengths agree (the evaluator's error,
    /// naming the operator `op`).
    pub(crate) fn zip_flat(
        &mut self,
        op: &str,
        x: &Val,
        y: &Val,
        to: &Av,
        mut f: impl FnMut(&mut Self, Val, Val) -> R<Vec<Operand>>,
    ) -> R<Operand> {
        let (Some(xe), Some(ye)) = (Self::array_elem(&x.av), Self::array_elem(&y.av)) else {
            return self.unsupported("internal: a point-wise map of a non-array");
        };
        let (xa, ya) = (x.leaves[0].clone(), y.leaves[0].clone());
        let n = self.let1(Ty::I64, Op::Length(xa.clone()));
        let m = self.let1(Ty::I64, Op::Length(ya.clone()));
        self.lengths_agree(op, &n, &m);
        self.flat_loop(&n, to, |s, i| {
            let a = s.flat_elem(&xa, i, xe)?;
            let b = s.flat_elem(&ya, i, ye)?;
            f(
                s,
                Val {
                    av: xe.clone(),
                    leaves: a,
                },
                Val {
                    av: ye.clone(),
                    leaves: b,
                },
            )
        })
    }

    /// Fails as the evaluator does where two arrays an element-wise operation `op` takes have
    /// different lengths `n` and `m`.
    pub(crate) fn lengths_agree(&mut self, op: &str, n: &Operand, m: &Operand) {
        let differ = self.let1(Ty::Bool, Op::Binary(BinOp::INe, m.clone(), n.clone()));
        let fail = if self.accumulating {
            Rt::AccLengthFail
        } else {
            Rt::LengthFail
        };
        self.b.push(Stmt::If {
            cond: differ,
            then: vec![Stmt::Let(
                Vec::new(),
                Op::Rt(fail, vec![Operand::Str(op.into()), n.clone(), m.clone()]),
            )],
            els: Vec::new(),
        });
    }

    /// `(build n f)`: the length checked as the evaluator checks it, then `f` called on 0, 1,
    /// ... in order, each result stored as an element.
    pub(crate) fn build(&mut self, t: &Target, a: Val, out: &Av, site: i64) -> R<Val> {
        let Some((n, f)) = self.two(&a, site)? else {
            return self.unsupported("`build` of an argument that is not a pair");
        };
        let Some(e) = Self::untagged_elem(out).cloned() else {
            return self.unsupported("`build` whose length is not a real");
        };
        let Some(nx) = self.checked_count(&n, site, "build", "length") else {
            return self.unsupported("`build` whose length is not a real");
        };
        self.build_loop(t, &nx, f, Av::real(), &e, out, site)
    }

    /// The forward version of `build` (`Target::ForwardBuild`), at the forward tags `t` of
    /// its argument: the length is a forward real (checked on its innermost primal, described
    /// whole in the error), and each index is the index lifted to `t`, whose tangents are
    /// known zeros, so it has one leaf.
    pub(crate) fn forward_build(&mut self, t: &Target, a: Val, out: &Av, site: i64) -> R<Val> {
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
        let nx = self.forward_count(&n, tags, site, "build", "length")?;
        let index = self.forward_index(tags)?;
        self.build_loop(t, &nx, f, index, &e, out, site)
    }

    /// The count `n` of a forward loop at the forward tags `tags` (`op`'s `what`): checked on
    /// its innermost primal, described whole in the error, as the evaluator's `%build-length`
    /// and `%ifold-count` check it. The innermost primal, a real.
    fn forward_count(
        &mut self,
        n: &Val,
        tags: Tags,
        site: i64,
        op: &str,
        what: &str,
    ) -> R<Operand> {
        let mut primal = n.clone();
        for _ in 0..tags.depth() {
            let Av::Bundle(p, d) = &primal.av else {
                return self.unsupported(format!(
                    "a forward `{op}` whose {what} is not a forward real"
                ));
            };
            let leaves = self.split(&[p, d], &primal.leaves)?.swap_remove(0);
            primal = Val {
                av: (**p).clone(),
                leaves,
            };
        }
        let Some(nx) = Self::real_expr(&primal) else {
            return self.unsupported(format!(
                "a forward `{op}` whose {what} is not a forward real"
            ));
        };
        let ok = self.rt(Ty::Bool, Rt::CountOk, vec![nx.clone()]);
        let ((), fail) = self.block(|s| {
            let b = s.boxed_for_display(n)?;
            s.rt_effect(
                Rt::CountFail,
                vec![
                    Operand::I64(site),
                    Operand::Str(op.into()),
                    Operand::Str(what.into()),
                    nx.clone(),
                    b,
                ],
            );
            Ok(())
        })?;
        self.b.push(Stmt::If {
            cond: ok,
            then: Vec::new(),
            els: fail,
        });
        Ok(nx)
    }

    /// An index of a forward loop at the forward tags `tags`: its tangents are known zeros,
    /// so it has one leaf, the index.
    fn forward_index(&mut self, tags: Tags) -> R<Av> {
        let index = self.an.lift_av(Av::real(), tags).map_err(flow_error)?;
        if self.layout(&index)? != [Ty::F64] {
            return self.unsupported("internal: a forward index of another layout");
        }
        Ok(index)
    }

    /// The loop of a `build` whose length `nx` was checked: element `i` is `f` applied to
    /// the index, a value of `index_av` whose one leaf is `i`.
    #[allow(clippy::too_many_arguments)]
    fn build_loop(
        &mut self,
        t: &Target,
        nx: &Operand,
        f: Val,
        index_av: Av,
        e: &Av,
        out: &Av,
        site: i64,
    ) -> R<Val> {
        let len = self.let1(Ty::I64, Op::Unary(UnOp::F64ToI64, nx.clone()));
        if *t == Target::Unreachable {
            // No element: an array of none.
            return self.array_loop(&len, out, |_, _| Ok(Val::known(Av::Bottom)));
        }
        let _ = e;
        self.array_loop(&len, out, |s, i| {
            let x = s.let1(Ty::F64, Op::Unary(UnOp::I64ToF64, i.clone()));
            let index = Val {
                av: index_av,
                leaves: vec![x],
            };
            s.apply(t, f, index, e, site)
        })
    }

    /// The procedure, the initial accumulator and the count (a real) of `ifold` or
    /// `%ifold-tape` (`name`), the count checked as the evaluator's `ifold` checks it.
    fn ifold_args(&mut self, a: &Val, site: i64, name: &str) -> R<(Val, Val, Operand)> {
        let Some((f, rest)) = self.two(a, site)? else {
            return self.unsupported(format!("`{name}` of an argument that is not a list"));
        };
        let Some((init, n)) = self.two(&rest, site)? else {
            return self.unsupported(format!("`{name}` of an argument that is not a list"));
        };
        let Some(nx) = self.checked_count(&n, site, "ifold", "count") else {
            return self.unsupported(format!("`{name}` whose count is not a real"));
        };
        Ok((f, init, nx))
    }

    /// `(ifold f init n)`: the count checked, then the accumulator, in the layout of the
    /// analysis's fixpoint `out`, threaded through `f` called on 0, 1, ... in order.
    pub(crate) fn ifold(&mut self, t: &Target, a: Val, out: &Av, site: i64) -> R<Val> {
        let (f, init, nx) = self.ifold_args(&a, site, "ifold")?;
        self.ifold_loop(t, f, init, &nx, Tags::EMPTY, Av::real(), out, site)
    }

    /// The forward version of `ifold` (`Target::ForwardIfold`), at the forward tags of its
    /// argument: the count is a forward real (checked as `forward_build` checks its length),
    /// and `f` is called on the forward pair of the accumulator and the index lifted to the
    /// tags (paper 002's D-IFold).
    pub(crate) fn forward_ifold(&mut self, t: &Target, a: Val, out: &Av, site: i64) -> R<Val> {
        let Av::Pair(tags, f_av, rest_av) = &a.av else {
            return self.unsupported("a forward `ifold` of an argument that is not a list");
        };
        let tags = *tags;
        let Av::Pair(_, init_av, n_av) = &**rest_av else {
            return self.unsupported("a forward `ifold` of an argument that is not a list");
        };
        let mut parts = self.parts(&a, &[f_av, rest_av])?;
        let rest = parts.pop().expect("two parts");
        let f = parts.pop().expect("two parts");
        let mut parts = self.parts(&rest, &[init_av, n_av])?;
        let n = parts.pop().expect("two parts");
        let init = parts.pop().expect("two parts");
        let nx = self.forward_count(&n, tags, site, "ifold", "count")?;
        let index = self.forward_index(tags)?;
        self.ifold_loop(t, f, init, &nx, tags, index, out, site)
    }

    /// The loop of an `ifold` whose count `nx` was checked: the accumulator, in the layout of
    /// `out`, threaded through `f` applied to the pair (of tags `tags`) of the accumulator and
    /// the index, a value of `index_av` whose one leaf is the index.
    #[allow(clippy::too_many_arguments)]
    fn ifold_loop(
        &mut self,
        t: &Target,
        f: Val,
        init: Val,
        nx: &Operand,
        tags: Tags,
        index_av: Av,
        out: &Av,
        site: i64,
    ) -> R<Val> {
        let init = self.coerce(init, out)?;
        if *t == Target::Unreachable {
            return Ok(init);
        }
        let layout = self.layout(out)?;
        let len = self.let1(Ty::I64, Op::Unary(UnOp::F64ToI64, nx.clone()));
        let accs: Vec<vlad_ir::Var> = layout
            .iter()
            .map(|ty| self.b.var(ty.clone(), "t"))
            .collect();
        let index = self.b.var(Ty::I64, "i");
        let acc_leaves: Vec<Operand> = accs.iter().map(|v| Operand::Var(*v)).collect();
        let (next, body) = self.block(|s| {
            let x = s.let1(Ty::F64, Op::Unary(UnOp::I64ToF64, Operand::Var(index)));
            let mut leaves = acc_leaves.clone();
            leaves.push(x);
            let arg = Val {
                av: Av::tagged_pair(tags, out.clone(), index_av.clone()),
                leaves,
            };
            let r = s.apply(t, f, arg, out, site)?;
            if r.av == Av::Bottom {
                // The step never returns: the accumulator stays.
                return Ok(acc_leaves.clone());
            }
            Ok(s.coerce(r, out)?.leaves)
        })?;
        self.b.push(Stmt::Ifold {
            accs,
            init: init.leaves,
            count: len,
            index,
            body,
            next,
        });
        Ok(Val {
            av: out.clone(),
            leaves: acc_leaves,
        })
    }

    /// `(%ifold-tape f init n)`: `ifold`'s loop, each step's result a pair whose first part is
    /// the next accumulator and whose second is stored as element `i` of a new flat array
    /// (the tape the reverse `ifold` sweeps). `out` is the analysis's pair of the accumulator's
    /// fixpoint and the array.
    pub(crate) fn ifold_tape(&mut self, t: &Target, a: Val, out: &Av, site: i64) -> R<Val> {
        let (f, init, nx) = self.ifold_args(&a, site, "%ifold-tape")?;
        let Av::Pair(_, acc_av, arr_av) = out else {
            if std::env::var_os("VLAD_C_DEBUG").is_some() {
                eprintln!("%ifold-tape gives {out:?}");
            }
            return self.unsupported("internal: `%ifold-tape` that gives no pair");
        };
        let (acc_av, arr_av) = ((**acc_av).clone(), (**arr_av).clone());
        let Some(e) = Self::untagged_elem(&arr_av).cloned() else {
            return self.unsupported("internal: `%ifold-tape` that gives no array");
        };
        let init = self.coerce(init, &acc_av)?;
        let len = self.let1(Ty::I64, Op::Unary(UnOp::F64ToI64, nx));
        let ty = self.array_ty(&e)?;
        let Ty::Array(layout) = ty.clone() else {
            unreachable!("an array type")
        };
        let tape = self.let1(
            ty,
            Op::NewArray {
                layout,
                count: len.clone(),
            },
        );
        if *t == Target::Unreachable {
            let mut leaves = init.leaves;
            leaves.push(tape);
            return Ok(Val {
                av: out.clone(),
                leaves,
            });
        }
        let acc_layout = self.layout(&acc_av)?;
        let accs: Vec<vlad_ir::Var> = acc_layout
            .iter()
            .map(|ty| self.b.var(ty.clone(), "t"))
            .collect();
        let index = self.b.var(Ty::I64, "i");
        let acc_leaves: Vec<Operand> = accs.iter().map(|v| Operand::Var(*v)).collect();
        let step_av = Av::pair(acc_av.clone(), e.clone());
        let (next, body) = self.block(|s| {
            let x = s.let1(Ty::F64, Op::Unary(UnOp::I64ToF64, Operand::Var(index)));
            let mut leaves = acc_leaves.clone();
            leaves.push(x);
            let arg = Val {
                av: Av::pair(acc_av.clone(), Av::real()),
                leaves,
            };
            let r = s.apply(t, f, arg, &step_av, site)?;
            if r.av == Av::Bottom {
                // The step never returns: the accumulator stays.
                return Ok(acc_leaves.clone());
            }
            let r = s.coerce(r, &step_av)?;
            let parts = s.split(&[&acc_av, &e], &r.leaves)?;
            let slots = s.elem_operands(&e, parts[1].clone())?;
            for (j, value) in slots.into_iter().enumerate() {
                s.b.push(Stmt::Store {
                    array: tape.clone(),
                    index: Operand::Var(index),
                    slot: j as u32,
                    value,
                });
            }
            Ok(parts[0].clone())
        })?;
        self.b.push(Stmt::Ifold {
            accs,
            init: init.leaves,
            count: len,
            index,
            body,
            next,
        });
        let mut leaves = acc_leaves;
        leaves.push(tape);
        Ok(Val {
            av: out.clone(),
            leaves,
        })
    }

    /// `(get a i)`: the index checked against the length (the evaluator's errors), then the
    /// element's leaves read in place. A boxed array, or an index that may not be a real (a
    /// boxed value), is checked at run time, the array first, as the evaluator checks them.
    pub(crate) fn get(&mut self, a: Val, out: &Av, site: i64) -> R<Val> {
        let Some((arr, i)) = self.two(&a, site)? else {
            return self.unsupported("`get` of an argument that is not a pair");
        };
        if let Av::Dyn(_) = arr.av {
            let t = match Self::real_expr(&i) {
                Some(ix) => self.rt(
                    Ty::Boxed,
                    Rt::BoxedGet,
                    vec![Operand::I64(site), arr.leaves[0].clone(), ix],
                ),
                None => {
                    let b = self.boxed_for_display(&i)?;
                    self.rt(
                        Ty::Boxed,
                        Rt::BoxedGetV,
                        vec![Operand::I64(site), arr.leaves[0].clone(), b],
                    )
                }
            };
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
        let len = self.array_len(&arr)?;
        let k = self.rt(Ty::I64, Rt::Index, vec![Operand::I64(site), ix, len]);
        let _ = e;
        self.elem_at(&arr, &k)
    }

    /// An index as a real: a real, or any other value checked at run time (`vl_index_real`:
    /// the evaluator's error where it is not a real).
    fn index_expr(&mut self, i: &Val, site: i64) -> R<Operand> {
        Ok(match Self::real_expr(i) {
            Some(ix) => ix,
            None => {
                let b = self.boxed_for_display(i)?;
                self.rt(Ty::F64, Rt::IndexReal, vec![Operand::I64(site), b])
            }
        })
    }

    /// `get` or `array-length` (`op`) of a value that is not an array (the analysis knows it:
    /// neither an array nor boxed): the evaluator's error, where the code is reached.
    fn not_an_array(&mut self, a: &Val, op: &str, site: i64) -> R<Val> {
        let b = self.boxed_for_display(a)?;
        self.rt_effect(
            Rt::NotArray,
            vec![Operand::I64(site), Operand::Str(op.into()), b],
        );
        Ok(Val::known(Av::Bottom))
    }

    /// `(array-length a)`.
    pub(crate) fn array_length(&mut self, a: Val, site: i64) -> R<Val> {
        if let Av::Dyn(_) = a.av {
            let n = self.rt(
                Ty::F64,
                Rt::BoxedLength,
                vec![Operand::I64(site), a.leaves[0].clone()],
            );
            return Ok(Val {
                av: Av::real(),
                leaves: vec![n],
            });
        }
        if Self::array_elem(&a.av).is_none() {
            return self.not_an_array(&a, "array-length", site);
        }
        let n = self.array_len(&a)?;
        let x = self.let1(Ty::F64, Op::Unary(UnOp::I64ToF64, n));
        Ok(Val {
            av: Av::real(),
            leaves: vec![x],
        })
    }

    /// The leaves of a constant in the layout of `to` (an array literal, or data holding
    /// some), lifted through the AD tags `tags` (a literal in transformed code): arrays are
    /// built, the rest converted from their known values.
    fn datum_leaves(&mut self, d: &Datum, tags: Tags, to: &Av) -> R<Vec<Operand>> {
        // A forward array kept as two (`soa.rs`): the literal's primal, and its zero lifted to
        // the tangent's tags (the tangent of a constant lifted through the forward tag).
        if let (Datum::Array(_), Some((p, q))) = (d, super::soa::soa_parts(to)) {
            if tags.top() == Some(vlad_core::Tag::Forward) {
                let rest = tags.pop();
                let mut out = self.datum_leaves(d, rest, &p)?;
                let tangent = rest.push(vlad_core::Tag::Perturbation).expect("same depth");
                out.extend(self.datum_leaves(&vlad_core::reverse::zero_datum(d), tangent, &q)?);
                return Ok(out);
            }
        }
        match (d, to) {
            (Datum::Array(items), Av::Array(t, _, e)) if *t == tags => {
                let ty = self.array_ty(e)?;
                let Ty::Array(layout) = ty.clone() else {
                    unreachable!("an array type")
                };
                let mut elems = Vec::with_capacity(items.len());
                for x in items.iter() {
                    let leaves = self.datum_leaves(x, tags, e)?;
                    elems.push(self.elem_operands(e, leaves)?);
                }
                let constant =
                    |x: &Operand| matches!(x, Operand::F64(_) | Operand::Bool(_) | Operand::I64(_));
                // Slots all known: the literal is data (one copy at start-up, C linear in it).
                if !layout.is_empty() && elems.iter().flatten().all(constant) {
                    let slots = elems.into_iter().flatten().collect();
                    return Ok(vec![self.let1(ty, Op::ArrayOf { layout, slots })]);
                }
                let arr = self.let1(
                    ty,
                    Op::NewArray {
                        layout,
                        count: Operand::I64(items.len() as i64),
                    },
                );
                for (i, slots) in elems.into_iter().enumerate() {
                    self.store_slots(&arr, i as i64, slots);
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
                let own = self.an.lift_av(datum_av(d), tags).map_err(flow_error)?;
                if !matches!(own, Av::Array(..)) {
                    return self.unsupported("an array constant of another layout");
                }
                let leaves = self.datum_leaves(d, tags, &own)?;
                self.coerce_leaves(&own, &leaves, to)
            }
            _ => {
                let av = self.an.lift_av(datum_av(d), tags).map_err(flow_error)?;
                self.coerce_leaves(&av, &[], to)
            }
        }
    }

    /// A constant holding arrays, built once at start-up into globals (flat arrays are never
    /// mutated, so every use can share them).
    pub(crate) fn array_constant(&mut self, d: &Datum, tags: Tags, av: &Av) -> R<Val> {
        let layout = self.layout(av)?;
        let names = self.detached(|s| {
            let leaves = s.datum_leaves(d, tags, av)?;
            let mut names = Vec::new();
            for (x, ty) in leaves.into_iter().zip(layout) {
                let g = s.global(format!("vl_a{}", s.out.globals.len()), ty);
                s.b.push(Stmt::SetGlobal(g, x));
                names.push(Operand::Global(g));
            }
            Ok(names)
        })?;
        Ok(Val {
            av: av.clone(),
            leaves: names,
        })
    }

    /// A flat array converted to another element value (a wider one: constants become
    /// leaves, parts are boxed). Where the two have one shape, and every slot `to` knows
    /// holds that value in `from`'s elements too, it is the same array.
    pub(crate) fn coerce_array(&mut self, src: &Operand, from: &Av, to: &Av) -> R<Vec<Operand>> {
        if from.shape() == to.shape() {
            let (a, _) = self.elem_slots(from)?;
            let (b, _) = self.elem_slots(to)?;
            if a.iter()
                .zip(&b)
                .all(|(x, y)| y.is_none() || same_slot(x, y))
            {
                return Ok(vec![src.clone()]);
            }
        }
        let arr = self.map_flat(src, from, to, |s, e| s.coerce_leaves(from, &e.leaves, to))?;
        Ok(vec![arr])
    }

    /// A flat array boxed, for printing or an error message, or as part of a boxed value: by
    /// reference (`vl_flatref`, O(1)), its elements boxed when they are read, by the boxer
    /// lowered for its element layout (`elem_boxer`).
    pub(crate) fn box_array(&mut self, src: &Operand, tags: Tags, e: &Av) -> R<Operand> {
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
        Ok(self.rt(
            Ty::Boxed,
            Rt::BoxFlatRef,
            vec![
                src.clone(),
                Operand::I64(tags.bits() as i64),
                Operand::I64(n as i64),
            ],
        ))
    }

    /// `vl_box_elem_N`, which boxes element `i` of a flat array `a` of the element layout `N`
    /// of `elem_boxers`.
    pub(crate) fn elem_boxer(&mut self, n: usize) -> R<vlad_ir::Function> {
        let (e, display) = self.elem_boxers[n].clone();
        let outer_display = std::mem::replace(&mut self.for_display, display);
        let ty = self.array_ty(&e)?;
        let (r, b) = self.in_function(|s| {
            let a = s.b.named_var(ty, "a".into());
            let i = s.b.named_var(Ty::I64, "i".into());
            let leaves = s.flat_elem(&Operand::Var(a), &Operand::Var(i), &e)?;
            let x = s.boxed_val(&Val { av: e, leaves })?;
            s.b.push(Stmt::Return(vec![x]));
            Ok(vec![a, i])
        });
        self.for_display = outer_display;
        Ok(b.finish(
            FuncKind::Helper {
                name: format!("vl_box_elem_{n}"),
                exported: false,
            },
            r?,
            Rc::from([Ty::Boxed]),
        ))
    }
}

/// Reverse mode through arrays: the three internal primitives of the reverse `get` and `build`
/// (the prelude, vlad-prelude).
impl Lowerer<'_, '_> {
    /// `(%onehot-sensitivity a k s)`: the sensitivity of the reverse array `a` that is `s` at
    /// index `k` (already checked by the `get` it is the backpropagator of). It stays lazy in
    /// the runtime (`vl_onehot`, O(1)), as in the evaluator, so the analysis boxes it. Where
    /// the zero of `a`'s elements is known, the node holds that zero (a constant) and only
    /// the length of `a`; otherwise it holds `a` boxed (by reference, also O(1)), to take
    /// each element's zero from when it is made dense.
    pub(crate) fn onehot(&mut self, a: Val, out: &Av) -> R<Val> {
        if *out == Av::Bottom {
            return Ok(Val::known(Av::Bottom));
        }
        let Some((arr, rest)) = self.two(&a, -1)? else {
            return self.unsupported("internal: `%onehot-sensitivity` of a non-pair");
        };
        let Some((k, s)) = self.two_raw(&rest, -1)? else {
            return self.unsupported("internal: `%onehot-sensitivity` of a non-pair");
        };
        // The index `get` checked (a boxed one is a real too).
        let ix = self.index_expr(&k, -1)?;
        if let Av::Dyn(_) = out {
            let s = self.boxed_val(&s)?;
            let k = self.let1(Ty::I64, Op::Unary(UnOp::F64ToI64, ix));
            return Ok(Val {
                av: out.clone(),
                leaves: vec![self.onehot_node(&arr, k, s)?],
            });
        }
        // Unboxed (`Av::OneHot`): the array, the index and the element's sensitivity, in the
        // layout of what the analysis found (the array's lazy zero where the element's is one).
        let zero = Val {
            av: Av::Zero(Rc::new(arr.av.clone())),
            leaves: arr.leaves.clone(),
        };
        let onehot = |s: Val| {
            let mut leaves = arr.leaves.clone();
            leaves.push(ix.clone());
            leaves.extend(s.leaves);
            Val {
                av: Av::OneHot(Rc::new(arr.av.clone()), Rc::new(s.av)),
                leaves,
            }
        };
        let v = match &s.av {
            Av::Zero(_) => zero,
            Av::OrZero(..) => {
                let (flag, _, x) = self.or_zero_parts(&s)?;
                self.branch(Cond::Test(flag), out, |_, then| {
                    Ok(if then {
                        zero.clone()
                    } else {
                        onehot(x.clone())
                    })
                })?
            }
            _ => onehot(s),
        };
        self.coerce(v, out)
    }

    /// The runtime's lazy one-hot node (`vl_onehot`) of the reverse array `arr`, `s` (boxed)
    /// at index `k`.
    pub(crate) fn onehot_node(&mut self, arr: &Val, k: Operand, s: Operand) -> R<Operand> {
        self.map_kinds.insert(vlad_ir::MapKind::ZeroSensitivity);
        let args = match &arr.av {
            Av::Dyn(_) => vec![
                arr.leaves[0].clone(),
                Operand::I64(0),
                Operand::I64(0),
                Operand::Null,
                k,
                s,
            ],
            Av::Array(t, _, e) if static_zero(e) => {
                let zero = self.boxed_val(&Val {
                    av: Av::Zero(Rc::new((**e).clone())),
                    leaves: Vec::new(),
                })?;
                let n = self.let1(Ty::I64, Op::Length(arr.leaves[0].clone()));
                vec![Operand::Null, n, Operand::I64(t.bits() as i64), zero, k, s]
            }
            Av::Array(t, _, e) => {
                let b = self.box_array(&arr.leaves[0], *t, e)?;
                vec![b, Operand::I64(0), Operand::I64(0), Operand::Null, k, s]
            }
            _ => return self.unsupported("internal: a one-hot sensitivity of a non-array"),
        };
        Ok(self.rt(Ty::Boxed, Rt::OneHot, args))
    }

    /// `(%list->array-rev l)`: the list `build`'s loop accumulated, last element first, as an
    /// array with the list's tags. A list of unknown length is boxed; its elements are then
    /// boxed too (the analysis joined them with the boxed tail), one slot each.
    pub(crate) fn list_to_array_rev(&mut self, l: Val, out: &Av) -> R<Val> {
        // Made by the runtime: a boxed array (`flat` 0), or a flat one of boxed elements.
        let flat = match out {
            Av::Dyn(_) => Some(0),
            Av::Array(_, _, e) if matches!(**e, Av::Dyn(_)) => Some(1),
            _ => None,
        };
        if let Some(flat) = flat {
            let b = self.boxed_val(&l)?;
            let ty = self.layout(out)?.pop().expect("one leaf");
            let x = self.rt(ty, Rt::ListToArrayRev, vec![b, Operand::I64(flat)]);
            return Ok(Val {
                av: out.clone(),
                leaves: vec![x],
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
            _ => Tags::EMPTY,
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
        let ty = self.array_ty(&e)?;
        let Ty::Array(layout) = ty.clone() else {
            unreachable!("an array type")
        };
        let n = items.len();
        let arr = self.let1(
            ty,
            Op::NewArray {
                layout,
                count: Operand::I64(n as i64),
            },
        );
        for (j, x) in items.into_iter().enumerate() {
            let leaves = self.coerce_leaves(&x.av, &x.leaves, &e)?;
            self.flat_store(&arr, (n - 1 - j) as i64, &e, leaves)?;
        }
        Ok(Val {
            av: out.clone(),
            leaves: vec![arr],
        })
    }

    /// `(%array->list-rev a)`: the sensitivity of an array made by `build` as the sensitivity
    /// of the list its loop accumulated (boxed).
    /// `(%dense s)`: the array sensitivity `s` with a lazy zero computed (by `force`), a boxed
    /// lazy one computed by the runtime, which also reports one that is not an array.
    pub(crate) fn dense(&mut self, a: Val, out: &Av, site: i64) -> R<Val> {
        let a = self.force(a)?;
        if *out == Av::Bottom || matches!(a.av, Av::Dyn(_)) {
            let b = self.boxed_for_display(&a)?;
            let r = self.rt(Ty::Boxed, Rt::DenseArray, vec![Operand::I64(site), b]);
            return Ok(Val {
                av: out.clone(),
                leaves: if *out == Av::Bottom { vec![] } else { vec![r] },
            });
        }
        Ok(a)
    }

    pub(crate) fn array_to_list_rev(&mut self, a: Val, out: &Av, site: i64) -> R<Val> {
        if *out == Av::Bottom {
            // Not an array: the runtime reports the evaluator's error.
            let b = self.boxed_for_display(&a)?;
            self.rt_effect(Rt::ArrayToListRev, vec![Operand::I64(site), b]);
            return Ok(Val::known(Av::Bottom));
        }
        let Av::Dyn(_) = out else {
            return self.unsupported("internal: `%array->list-rev` that is not boxed");
        };
        let b = self.boxed_val(&a)?;
        Ok(Val {
            av: out.clone(),
            leaves: vec![self.rt(Ty::Boxed, Rt::ArrayToListRev, vec![Operand::I64(site), b])],
        })
    }
}

/// Does `a` describe no value at all: no value, or an aggregate with a part of no value (an
/// array of no elements is a value).
pub(crate) fn no_value(a: &Av) -> bool {
    match a {
        Av::Bottom => true,
        Av::Pair(_, x, y) | Av::Bundle(x, y) => no_value(x) || no_value(y),
        Av::Tagged(_, x) | Av::Zero(x) => no_value(x),
        Av::OrZero(z, x) => no_value(z) && no_value(x),
        Av::OneHot(_, x) => no_value(x),
        Av::Sum(o, d) => no_value(o) && no_value(d),
        Av::Closure(_, env) => env.iter().any(no_value),
        _ => false,
    }
}
