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
            (Av::Array(..), Av::OneHot(..)) | (Av::Array(..), Av::Array(..))
                if !soa && matches!(image, Av::Array(..)) =>
            {
                self.accumulate_in_place(a, b, &image)?
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
    /// image's.
    fn accumulate_in_place(&mut self, a: &Val, b: &Val, image: &Av) -> R<Val> {
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
        let owned = if same {
            self.rt(Ty::Bool, Rt::AccOwned, vec![src.clone()])
        } else {
            Operand::Bool(false)
        };
        let ((), keep) = self.block(|s| {
            s.b.push(Stmt::Set(arr, src.clone()));
            Ok(())
        })?;
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
            let c = s.acc_mark(image, c);
            s.b.push(Stmt::Set(arr, c));
            Ok(())
        })?;
        self.b.push(Stmt::If {
            cond: owned,
            then: keep,
            els: copy,
        });
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
