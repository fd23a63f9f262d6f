//! One-hot array sensitivities and the accumulators of reverse-mode sweeps.
//!
//! Reverse-mode `get` gives its array a sensitivity that is zero but at one index
//! (`Av::OneHot`): here the array, the index and the element's leaves, never allocated. The
//! sweeps of the reverse `build` and `ifold` (`vlad-prelude`) add what each step's
//! backpropagator gives into an accumulator with `%accumulate`, which is `plus` with one
//! difference in compiled code: the accumulator's arrays are added into in place, so that a
//! sweep over n steps that each read one element costs O(n), not O(n) per step (paper 004 §7:
//! sensitivities accumulated in mutable arrays).
//!
//! In place is safe only for an array no one else holds. An array `%accumulate` made is marked
//! (`vl_acc_mark`) and only a marked array is added into (`vl_acc_owned`); any other is copied
//! first. A sweep's accumulator starts as a lazy zero (the first addition copies what is added:
//! `densify_copy`), and only `%accumulate` takes it as its first argument, so a marked array is
//! the accumulator of the sweep that made it until that sweep ends, and the prelude never gives
//! an array a sweep returned to another as its starting accumulator.

use super::{flow_error, Cond, Lowerer, Val, R};
use std::rc::Rc;
use vlad_core::Prim;
use vlad_flow::Av;
use vlad_ir::{BinOp, Op, Operand, Rt, Stmt, Ty, UnOp};

/// What `sum_cases` does with the parts of a sum that are there (the one-hot, the dense array).
type SumCase<'f, L> = dyn FnMut(&mut L, Option<&Val>, Option<&Val>) -> R<Val> + 'f;

impl Lowerer<'_, '_> {
    /// The parts of a one-hot sensitivity: the reverse array it is the sensitivity of (its
    /// value), the index (an `i64`), and the element's sensitivity.
    pub(crate) fn onehot_parts(&mut self, v: &Val) -> R<(Val, Operand, Val)> {
        let Av::OneHot(of, x) = &v.av else {
            return self.unsupported("internal: the parts of a value that is not a one-hot");
        };
        let parts = self.split(&[of, &Av::real(), x], &v.leaves)?;
        let k = self.let1(Ty::I64, Op::Unary(UnOp::F64ToI64, parts[1][0].clone()));
        Ok((
            Val {
                av: (**of).clone(),
                leaves: parts[0].clone(),
            },
            k,
            Val {
                av: (**x).clone(),
                leaves: parts[2].clone(),
            },
        ))
    }

    /// The dense flat array a one-hot sensitivity stands for (the analysis's `force`): each
    /// element the zero of the reverse array's element but at the index. `mark`: as an
    /// accumulator's array (`vl_acc_mark`).
    pub(crate) fn materialize_onehot(&mut self, v: &Val, mark: bool) -> R<Val> {
        let dense = self.an.force_av(&v.av).map_err(flow_error)?;
        let Av::Array(_, _, elem) = &dense else {
            return self.unsupported("internal: a one-hot of an array that is not flat");
        };
        let elem = (**elem).clone();
        let (of, k, x) = self.onehot_parts(v)?;
        let Av::Array(_, _, oe) = &of.av else {
            return self.unsupported("internal: a one-hot of an array that is not flat");
        };
        let oe = (**oe).clone();
        let src = of.leaves[0].clone();
        let n = self.let1(Ty::I64, Op::Length(src.clone()));
        let arr = self.flat_loop(&n, &elem, |s, i| {
            let hit = s.let1(Ty::Bool, Op::Binary(BinOp::IEq, i.clone(), k.clone()));
            let r = s.branch(Cond::Test(hit), &elem, |s, then| {
                if then {
                    return Ok(x.clone());
                }
                // The lazy zero of element i keeps that element's leaves.
                let leaves = if super::layout::static_zero(&oe) {
                    Vec::new()
                } else {
                    s.flat_elem(&src, i, &oe)?
                };
                Ok(Val {
                    av: Av::Zero(Rc::new(oe.clone())),
                    leaves,
                })
            })?;
            Ok(r.leaves)
        })?;
        let arr = if mark {
            self.acc_mark(&dense, arr)
        } else {
            arr
        };
        Ok(Val {
            av: dense,
            leaves: vec![arr],
        })
    }

    /// Marks a flat array made here as an accumulator's (the runtime returns it).
    fn acc_mark(&mut self, av: &Av, arr: Operand) -> Operand {
        let ty = match self.layout(av) {
            Ok(mut l) if l.len() == 1 => l.remove(0),
            _ => Ty::Boxed,
        };
        self.rt(ty, Rt::AccMark, vec![arr])
    }

    /// `f` on the parts of a one-hot plus a dense sensitivity (`Av::Sum`) that are there, in a
    /// branch for each case the flags of parts that may be absent allow (the leaves of an
    /// absent part are never read; one part at least is there): its value in the layout of
    /// `to`.
    pub(crate) fn sum_cases(&mut self, v: &Val, to: &Av, f: &mut SumCase<'_, Self>) -> R<Val> {
        let Av::Sum(o, d) = &v.av else {
            return self.unsupported("internal: the parts of a value that is not a sum");
        };
        let parts = self.raw_parts(v, &[o, d])?;
        let (oflag, o) = self.present(&parts[0])?;
        let (dflag, d) = self.present(&parts[1])?;
        match oflag {
            None => self.sum_with_onehot(&o, &dflag, &d, to, f),
            Some(flag) => self.branch(Cond::Test(flag), to, |s, absent| {
                if absent {
                    f(s, None, Some(&d))
                } else {
                    s.sum_with_onehot(&o, &dflag, &d, to, f)
                }
            }),
        }
    }

    /// `sum_cases` where the one-hot part is there.
    fn sum_with_onehot(
        &mut self,
        o: &Val,
        dflag: &Option<Operand>,
        d: &Val,
        to: &Av,
        f: &mut SumCase<'_, Self>,
    ) -> R<Val> {
        match dflag {
            None => f(self, Some(o), Some(d)),
            Some(flag) => self.branch(Cond::Test(flag.clone()), to, |s, absent| {
                f(s, Some(o), (!absent).then_some(d))
            }),
        }
    }

    /// A part of a sum: the flag saying it is absent where it may be (`Av::OrZero`), and the
    /// part where it is there.
    fn present(&mut self, p: &Val) -> R<(Option<Operand>, Val)> {
        if let Av::OrZero(..) = p.av {
            let (flag, _, x) = self.or_zero_parts(p)?;
            return Ok((Some(flag), x));
        }
        Ok((None, p.clone()))
    }

    /// The leaves of an absent part of a sum (`Av::OrZero`, flagged a lazy zero; the zero's
    /// reverse array is not known here and never read).
    pub(crate) fn absent_part(&mut self, part: &Av) -> R<Vec<Operand>> {
        let Av::OrZero(of, x) = part else {
            return self.unsupported("internal: a part of a sum that cannot be absent");
        };
        let mut out = vec![Operand::Bool(true)];
        out.extend(self.placeholders(&Av::Zero(of.clone()))?);
        out.extend(self.placeholders(x)?);
        Ok(out)
    }

    /// `(plus a b)` of a one-hot and a dense array sensitivity (either order) as the two, the
    /// lengths checked as the evaluator checks a lazy sum's.
    pub(crate) fn make_sum(&mut self, a: &Val, b: &Val, image: &Av) -> R<Vec<Operand>> {
        let length = |s: &mut Self, v: &Val| -> R<Operand> {
            let arr = match &v.av {
                Av::OneHot(..) => s.onehot_parts(v)?.0.leaves[0].clone(),
                _ => v.leaves[0].clone(),
            };
            Ok(s.let1(Ty::I64, Op::Length(arr)))
        };
        let (n, m) = (length(self, a)?, length(self, b)?);
        self.lengths_agree("plus", &n, &m);
        let (o, d) = if matches!(a.av, Av::OneHot(..)) {
            (a, b)
        } else {
            (b, a)
        };
        let from = Av::Sum(Rc::new(o.av.clone()), Rc::new(d.av.clone()));
        let mut leaves = o.leaves.clone();
        leaves.extend(d.leaves.iter().cloned());
        self.coerce_leaves(&from, &leaves, image)
    }

    /// `(plus a b)` of a sum and a dense array (either order): the sum of the dense part and
    /// the array, in the operands' order, beside the one-hot; the one-hot's length checked
    /// against the array's where it is there (the dense part's is checked by its `plus`).
    pub(crate) fn plus_sum_dense(&mut self, a: &Val, b: &Val, image: &Av) -> R<Vec<Operand>> {
        let sum_first = matches!(a.av, Av::Sum(..));
        let (sum, e) = if sum_first { (a, b) } else { (b, a) };
        let Av::Sum(o, d) = &sum.av else {
            return self.unsupported("internal: the parts of a value that is not a sum");
        };
        let parts = self.raw_parts(sum, &[o, d])?;
        let (oflag, onehot) = self.present(&parts[0])?;
        let ((), check) = self.block(|s| {
            let of = s.onehot_parts(&onehot)?.0.leaves[0].clone();
            let n = s.let1(Ty::I64, Op::Length(of));
            let m = s.let1(Ty::I64, Op::Length(e.leaves[0].clone()));
            if sum_first {
                s.lengths_agree("plus", &n, &m);
            } else {
                s.lengths_agree("plus", &m, &n);
            }
            Ok(())
        })?;
        match oflag {
            None => {
                for s in check {
                    self.b.push(s);
                }
            }
            Some(absent) => self.b.push(Stmt::If {
                cond: absent,
                then: Vec::new(),
                els: check,
            }),
        }
        let (x, y) = if sum_first {
            (&parts[1], e)
        } else {
            (e, &parts[1])
        };
        let dense = self.prim_result(Prim::Plus, &Av::pair(x.av.clone(), y.av.clone()))?;
        let mut leaves = parts[0].leaves.clone();
        leaves.extend(self.plus(x, y)?);
        let from = Av::Sum(o.clone(), Rc::new(dense));
        self.coerce_leaves(&from, &leaves, image)
    }

    /// The dense array a sum stands for: the dense part where there is no one-hot, the
    /// one-hot made dense where there is no dense part, else a copy of the dense part with
    /// the one-hot added into it (the analysis's `force`).
    pub(crate) fn force_sum(&mut self, v: &Val) -> R<Val> {
        let to = self.an.force_av(&v.av).map_err(flow_error)?;
        self.sum_cases(v, &to, &mut |s, o, d| match (o, d) {
            (Some(o), None) => s.materialize_onehot(o, false),
            (Some(o), Some(d)) => s.accumulate_in_place(d, o, &to, false),
            (None, Some(d)) => Ok(d.clone()),
            (None, None) => s.unsupported("internal: a sum of no parts"),
        })
    }

    /// A boxed sum: the runtime's lazy sum (`vl_ad_plus`) of its parts, or the part that is
    /// there.
    pub(crate) fn box_sum(&mut self, v: &Val) -> R<Operand> {
        let to = v.av.boxed(&mut vlad_flow::domain::Boxes::default());
        let r = self.sum_cases(v, &to, &mut |s, o, d| {
            let leaves = vec![match (o, d) {
                (Some(o), None) => s.box_onehot(o)?,
                (None, Some(d)) => s.boxed_val(d)?,
                (Some(o), Some(d)) => {
                    let (x, y) = (s.box_onehot(o)?, s.boxed_val(d)?);
                    s.rt(Ty::Boxed, Rt::AdPlus, vec![x, y])
                }
                (None, None) => return s.unsupported("internal: a sum of no parts"),
            }];
            Ok(Val {
                av: to.clone(),
                leaves,
            })
        })?;
        Ok(r.leaves[0].clone())
    }

    /// A boxed one-hot: the runtime's lazy node (`vl_onehot`), as the evaluator keeps it.
    pub(crate) fn box_onehot(&mut self, v: &Val) -> R<Operand> {
        let (of, k, x) = self.onehot_parts(v)?;
        let s = self.boxed_val(&x)?;
        self.onehot_node(&of, k, s)
    }

    /// `v`, a sensitivity added to a lazy zero accumulator, with its arrays copied into new
    /// ones (marked: the accumulator's own) and its one-hots made dense: the layout of the
    /// analysis's `densified`.
    pub(crate) fn densify_copy(&mut self, v: &Val) -> R<Val> {
        let to = self.an.densified(&v.av).map_err(flow_error)?;
        let out = match &v.av {
            Av::OneHot(..) => {
                let d = self.materialize_onehot(v, true)?;
                return self.coerce(d, &to);
            }
            // The dense part copied, the one-hot added into the copy (the analysis's).
            Av::Sum(o, d) => {
                let parts = self.raw_parts(v, &[o, d])?;
                let t = self.densify_copy(&parts[1])?;
                let r = self.accumulate(&t, &parts[0])?;
                return self.coerce(r, &to);
            }
            // A forward array (two arrays, soa.rs) is never added into in place (below), so
            // it needs no copy of its own.
            Av::Array(..) if crate::soa::soa_parts(&v.av).is_some() => {
                return self.coerce(v.clone(), &to);
            }
            Av::Array(_, _, e) => {
                let Av::Array(_, _, te) = &to else {
                    return self.unsupported("internal: an array densified to another value");
                };
                let (e, te) = ((**e).clone(), (**te).clone());
                let src = v.leaves[0].clone();
                let n = self.let1(Ty::I64, Op::Length(src.clone()));
                let arr = self.flat_loop(&n, &te, |s, i| {
                    let leaves = s.flat_elem(&src, i, &e)?;
                    let x = s.densify_copy(&Val {
                        av: e.clone(),
                        leaves,
                    })?;
                    Ok(s.coerce(x, &te)?.leaves)
                })?;
                vec![self.acc_mark(&to, arr)]
            }
            Av::Pair(..) | Av::Tagged(..) | Av::Closure(..) => {
                let parts = self.components(v, false)?;
                let mut out = Vec::new();
                for p in &parts {
                    out.extend(self.densify_copy(p)?.leaves);
                }
                out
            }
            Av::OrZero(..) => {
                let (flag, zero, x) = self.or_zero_parts(v)?;
                let r = self.branch(Cond::Test(flag), &to, |s, then| {
                    if then {
                        Ok(zero.clone())
                    } else {
                        s.densify_copy(&x)
                    }
                })?;
                r.leaves
            }
            _ => return Ok(v.clone()),
        };
        Ok(Val {
            av: to,
            leaves: out,
        })
    }

    /// `(%accumulate a b)`: `plus`, adding into `a`'s arrays in place where they are the
    /// accumulator's own (see the module documentation).
    pub(crate) fn accumulate(&mut self, a: &Val, b: &Val) -> R<Val> {
        let outer = std::mem::replace(&mut self.accumulating, true);
        let r = self.accumulate_values(a, b);
        self.accumulating = outer;
        r
    }

    fn accumulate_values(&mut self, a: &Val, b: &Val) -> R<Val> {
        let image = self
            .an
            .apply(
                &Av::Prim(Prim::Accumulate),
                &Av::pair(a.av.clone(), b.av.clone()),
            )
            .map_err(flow_error)?;
        if image == Av::Bottom {
            return self.unsupported("internal: an accumulation that fails");
        }
        // A forward array is two arrays (soa.rs), which the in-place addition below does not
        // handle: it is added as `plus` adds, into a new one.
        let soa = crate::soa::soa_parts(&a.av).is_some() || crate::soa::soa_parts(&b.av).is_some();
        let v = match (&a.av, &b.av) {
            (Av::Zero(_), _) => self.densify_copy(b)?,
            (Av::OrZero(..), _) => {
                let (flag, _, x) = self.or_zero_parts(a)?;
                self.branch(Cond::Test(flag), &image, |s, then| {
                    if then {
                        s.densify_copy(b)
                    } else {
                        s.accumulate(&x, b)
                    }
                })?
            }
            (_, Av::Zero(_)) => a.clone(),
            (_, Av::OrZero(..)) => {
                let (flag, _, y) = self.or_zero_parts(b)?;
                self.branch(Cond::Test(flag), &image, |s, then| {
                    if then {
                        Ok(a.clone())
                    } else {
                        s.accumulate(a, &y)
                    }
                })?
            }
            // The dense part, then the one-hot (the analysis's).
            (Av::Array(..), Av::Sum(o, d)) => {
                let parts = self.raw_parts(b, &[o, d])?;
                let t = self.accumulate(a, &parts[1])?;
                self.accumulate(&t, &parts[0])?
            }
            (Av::Array(..), Av::OneHot(..)) | (Av::Array(..), Av::Array(..))
                if !soa && matches!(image, Av::Array(..)) =>
            {
                self.accumulate_in_place(a, b, &image, true)?
            }
            (Av::Pair(t, ..), Av::Pair(u, ..)) if t == u => self.accumulate_parts(a, b, &image)?,
            (Av::Tagged(t, _), Av::Tagged(u, _)) if t == u => {
                self.accumulate_parts(a, b, &image)?
            }
            (Av::Closure(c, _), Av::Closure(d, _)) if c == d => {
                self.accumulate_parts(a, b, &image)?
            }
            _ => {
                let av = self.prim_result(Prim::Plus, &Av::pair(a.av.clone(), b.av.clone()))?;
                let leaves = self.plus(a, b)?;
                Val { av, leaves }
            }
        };
        if v.av == Av::Bottom {
            return Ok(v);
        }
        self.coerce(v, &image)
    }

    /// `accumulate` of two pairs, tagged values or closures of one code, part by part.
    fn accumulate_parts(&mut self, a: &Val, b: &Val, image: &Av) -> R<Val> {
        let leaves = self.zip_parts(a, b, false, |s, x, y| Ok(s.accumulate(x, y)?.leaves))?;
        Ok(Val {
            av: image.clone(),
            leaves,
        })
    }

    /// `b`, a one-hot or an array of `a`'s length, added into the flat array `a` (copied
    /// first, marked, unless it is an accumulator's own), its elements in the layout of the
    /// image's. Not `in_place`: into a copy, not marked (a sum made dense).
    fn accumulate_in_place(&mut self, a: &Val, b: &Val, image: &Av, in_place: bool) -> R<Val> {
        let (Av::Array(_, _, ae), Av::Array(_, _, ie)) = (&a.av, image) else {
            return self.unsupported("internal: an accumulator that is not an array");
        };
        let (ae, ie) = ((**ae).clone(), (**ie).clone());
        let ty = self.layout(image)?.remove(0);
        // The accumulator's array: its own (marked) if the elements keep their layout, else a
        // copy in the image's layout (marked when made).
        let src = a.leaves[0].clone();
        let arr = self.b.var(ty.clone(), "acc");
        self.b.push(Stmt::Declare(vec![arr]));
        let same = self.layout(&ae.shape())? == self.layout(&ie.shape())? && ae == ie;
        // (Not in place, or not of the image's layout: copied; the copy is the sum's own.)
        let owned = (same && in_place).then(|| self.rt(Ty::Bool, Rt::AccOwned, vec![src.clone()]));
        let ((), copy) = self.block(|s| {
            let n = s.let1(Ty::I64, Op::Length(src.clone()));
            let c = s.flat_loop(&n, &ie, |s, i| {
                let leaves = s.flat_elem(&src, i, &ae)?;
                let x = Val {
                    av: ae.clone(),
                    leaves,
                };
                Ok(s.coerce(x, &ie)?.leaves)
            })?;
            let c = if in_place { s.acc_mark(image, c) } else { c };
            s.b.push(Stmt::Set(arr, c));
            Ok(())
        })?;
        if let Some(owned) = owned {
            let ((), keep) = self.block(|s| {
                s.b.push(Stmt::Set(arr, src.clone()));
                Ok(())
            })?;
            self.b.push(Stmt::If {
                cond: owned,
                then: keep,
                els: copy,
            });
        } else {
            for s in copy {
                self.b.push(s);
            }
        }
        let acc = Operand::Var(arr);
        let n = self.let1(Ty::I64, Op::Length(acc.clone()));
        // Adds `x` into element `i` of the accumulator.
        let add = |s: &mut Self, i: &Operand, x: Val| -> R<()> {
            let leaves = s.flat_elem(&acc, i, &ie)?;
            let cur = Val {
                av: ie.clone(),
                leaves,
            };
            let av = s.prim_result(Prim::Plus, &Av::pair(ie.clone(), x.av.clone()))?;
            let sum = s.plus(&cur, &x)?;
            let sum = s.coerce(Val { av, leaves: sum }, &ie)?;
            let slots = s.elem_operands(&ie, sum.leaves)?;
            for (j, value) in slots.into_iter().enumerate() {
                s.b.push(Stmt::Store {
                    array: acc.clone(),
                    index: i.clone(),
                    slot: j as u32,
                    value,
                });
            }
            Ok(())
        };
        match &b.av {
            Av::OneHot(..) => {
                let (of, k, x) = self.onehot_parts(b)?;
                let m = self.let1(Ty::I64, Op::Length(of.leaves[0].clone()));
                self.lengths_agree("plus", &n, &m);
                add(self, &k, x)?;
            }
            Av::Array(_, _, be) => {
                let be = (**be).clone();
                let bsrc = b.leaves[0].clone();
                let m = self.let1(Ty::I64, Op::Length(bsrc.clone()));
                self.lengths_agree("plus", &n, &m);
                let index = self.b.var(Ty::I64, "i");
                let i = Operand::Var(index);
                let ((), body) = self.block(|s| {
                    let leaves = s.flat_elem(&bsrc, &i, &be)?;
                    add(
                        s,
                        &i,
                        Val {
                            av: be.clone(),
                            leaves,
                        },
                    )
                })?;
                self.b.push(Stmt::For {
                    index,
                    count: n.clone(),
                    body,
                });
            }
            _ => return self.unsupported("internal: an accumulation of another value"),
        }
        Ok(Val {
            av: image.clone(),
            leaves: vec![acc],
        })
    }
}
