//! Forward arrays as two arrays.
//!
//! A forward array (its AD tags' outermost a forward tag: what `bundle` makes of two arrays,
//! and what the forward versions of `build` and `ifold` give) is, as a value, an array of
//! forward elements: the evaluator keeps it so, and the analysis describes it so
//! (`Av::Array([.. forward], n, e)`). Compiled, it is kept as a structure of two arrays: the
//! array of the elements' primals and the array of their tangents (`soa_parts`). `primal` and
//! `tangent` of such an array are then one of its two arrays and `bundle` of two arrays is the
//! pair, where an array of forward elements would be copied element by element each time: a
//! forward derivative of code that reverse-mode sweeps an array (a Hessian-vector product
//! through `grad-R`) takes the primal and the tangent of the sweep's arrays at every step, and
//! was quadratic.
//!
//! Everything that reads or makes an array element by element goes through `elem_at`,
//! `elem_put`, `array_len` and `array_loop`, which look through the two arrays; an array of
//! another kind is one flat array (`arrays.rs`). A forward array whose elements hold boxed parts
//! is one flat array too (the split of a boxed element is the runtime's).

use super::{Lowerer, Val, R};
use std::rc::Rc;
use vlad_core::{Prim, Tag, Tags};
use vlad_flow::Av;
use vlad_ir::{Op, Operand, Stmt, Ty};

/// The primal (or tangent) of a forward element value, as the analysis's `split` gives it, for
/// the values whose split needs no code (`None` for the others: closures, boxed parts, lazy
/// zeros).
fn split_av(e: &Av, tangent: bool) -> Option<Av> {
    Some(match e {
        Av::Bottom => Av::Bottom,
        Av::Bundle(p, t) => {
            if tangent {
                (**t).clone()
            } else {
                (**p).clone()
            }
        }
        Av::Pair(t, a, d) if t.top() == Some(Tag::Forward) => Av::tagged_pair(
            split_tags(*t, tangent),
            split_av(a, tangent)?,
            split_av(d, tangent)?,
        ),
        Av::Array(t, n, x) if t.top() == Some(Tag::Forward) => {
            Av::array(split_tags(*t, tangent), *n, split_av(x, tangent)?)
        }
        _ => return None,
    })
}

/// The tags of the primal (or tangent) of a value tagged `t`, forward outermost.
fn split_tags(t: Tags, tangent: bool) -> Tags {
    let rest = t.pop();
    if tangent {
        rest.push(Tag::Perturbation).expect("same depth")
    } else {
        rest
    }
}

/// The array of primals and the array of tangents a forward array is kept as, or `None` if
/// `av` is not an array kept so.
pub(crate) fn soa_parts(av: &Av) -> Option<(Av, Av)> {
    let Av::Array(t, n, e) = av else { return None };
    if t.top() != Some(Tag::Forward) {
        return None;
    }
    let p = split_av(e, false)?;
    let q = split_av(e, true)?;
    Some((
        Av::Array(split_tags(*t, false), *n, Rc::new(p)),
        Av::Array(split_tags(*t, true), *n, Rc::new(q)),
    ))
}

impl Lowerer<'_, '_> {
    /// The two arrays of a forward array kept as two (`soa_parts`), as values.
    pub(crate) fn soa_vals(&self, a: &Val) -> R<Option<(Val, Val)>> {
        let Some((p, q)) = soa_parts(&a.av) else {
            return Ok(None);
        };
        let parts = self.split(&[&p, &q], &a.leaves)?;
        Ok(Some((
            Val {
                av: p,
                leaves: parts[0].clone(),
            },
            Val {
                av: q,
                leaves: parts[1].clone(),
            },
        )))
    }

    /// The length of an array value (not boxed).
    pub(crate) fn array_len(&mut self, a: &Val) -> R<Operand> {
        match self.soa_vals(a)? {
            Some((p, _)) => self.array_len(&p),
            None => Ok(self.let1(Ty::I64, Op::Length(a.leaves[0].clone()))),
        }
    }

    /// Element `i` of an array value (not boxed; the index in range), a value of its element
    /// value.
    pub(crate) fn elem_at(&mut self, a: &Val, i: &Operand) -> R<Val> {
        let Av::Array(_, _, e) = &a.av else {
            return self.unsupported("internal: an element of a value that is not an array");
        };
        let e = (**e).clone();
        match self.soa_vals(a)? {
            Some((p, q)) => {
                let x = self.elem_at(&p, i)?;
                let y = self.elem_at(&q, i)?;
                let av = self.prim_result(Prim::Bundle, &Av::pair(x.av.clone(), y.av.clone()))?;
                let leaves = self.bundle(&x, &y)?;
                self.coerce(Val { av, leaves }, &e)
            }
            None => Ok(Val {
                leaves: self.flat_elem(&a.leaves[0], i, &e)?,
                av: e,
            }),
        }
    }

    /// Stores `v` as element `i` of the array value `a` (one being made).
    pub(crate) fn elem_put(&mut self, a: &Val, i: &Operand, v: Val) -> R<()> {
        let Av::Array(_, _, e) = &a.av else {
            return self.unsupported("internal: an element of a value that is not an array");
        };
        let e = (**e).clone();
        let v = self.coerce(v, &e)?;
        match self.soa_vals(a)? {
            Some((p, q)) => {
                for (part, tangent) in [(p, false), (q, true)] {
                    let Av::Array(_, _, pe) = &part.av else {
                        unreachable!("the parts of an array are arrays")
                    };
                    let x = Val {
                        av: (**pe).clone(),
                        leaves: self.split_forward(&v, tangent)?,
                    };
                    self.elem_put(&part, i, x)?;
                }
                Ok(())
            }
            None => {
                let slots = self.elem_operands(&e, v.leaves)?;
                for (j, value) in slots.into_iter().enumerate() {
                    self.b.push(Stmt::Store {
                        array: a.leaves[0].clone(),
                        index: i.clone(),
                        slot: j as u32,
                        value,
                    });
                }
                Ok(())
            }
        }
    }

    /// A new array of value `arr` of `n` elements, not yet stored.
    fn array_new(&mut self, arr: &Av, n: &Operand) -> R<Val> {
        if let Some((p, q)) = soa_parts(arr) {
            let mut leaves = self.array_new(&p, n)?.leaves;
            leaves.extend(self.array_new(&q, n)?.leaves);
            return Ok(Val {
                av: arr.clone(),
                leaves,
            });
        }
        let Av::Array(_, _, e) = arr else {
            return self.unsupported("internal: a new array of a value that is not an array");
        };
        let ty = self.array_ty(e)?;
        let Ty::Array(layout) = ty.clone() else {
            unreachable!("an array type")
        };
        Ok(Val {
            av: arr.clone(),
            leaves: vec![self.let1(
                ty,
                Op::NewArray {
                    layout,
                    count: n.clone(),
                },
            )],
        })
    }

    /// A new array of value `arr` of `n` elements, element `i` the value `elem` gives for it,
    /// made in index order (no value: the element never comes, its slots are not stored).
    pub(crate) fn array_loop(
        &mut self,
        n: &Operand,
        arr: &Av,
        elem: impl FnOnce(&mut Self, &Operand) -> R<Val>,
    ) -> R<Val> {
        if soa_parts(arr).is_none() {
            let Av::Array(_, _, e) = arr else {
                return self.unsupported("internal: a loop making a value that is not an array");
            };
            let e = (**e).clone();
            let a = self.flat_loop(n, &e, |s, i| {
                let v = elem(s, i)?;
                if v.av == Av::Bottom {
                    return s.placeholders(&e);
                }
                Ok(s.coerce(v, &e)?.leaves)
            })?;
            return Ok(Val {
                av: arr.clone(),
                leaves: vec![a],
            });
        }
        let out = self.array_new(arr, n)?;
        let index = self.b.var(Ty::I64, "i");
        let i = Operand::Var(index);
        let ((), body) = self.block(|s| {
            let v = elem(s, &i)?;
            if v.av != Av::Bottom {
                s.elem_put(&out, &i, v)?;
            }
            Ok(())
        })?;
        self.b.push(Stmt::For {
            index,
            count: n.clone(),
            body,
        });
        Ok(out)
    }

    /// The array `to` (an array value) whose element `i` has the leaves `f` gives for element
    /// `i` of the array `src`: the flat arrays' map (`map_flat`, which keeps the same array
    /// where nothing changes), or element by element through the two arrays of forward ones.
    pub(crate) fn map_array(
        &mut self,
        src: &Val,
        to: &Av,
        mut f: impl FnMut(&mut Self, Val) -> R<Vec<Operand>>,
    ) -> R<Vec<Operand>> {
        let (Av::Array(_, _, from_e), Av::Array(_, _, to_e)) = (&src.av, to) else {
            return self.unsupported("internal: a map of a value that is not an array");
        };
        let (from_e, to_e) = ((**from_e).clone(), (**to_e).clone());
        self.elements_map(&[&from_e], &to_e)?;
        if soa_parts(&src.av).is_none() && soa_parts(to).is_none() {
            return Ok(vec![self.map_flat(&src.leaves[0], &from_e, &to_e, f)?]);
        }
        let n = self.array_len(src)?;
        let v = self.array_loop(&n, to, |s, i| {
            let x = s.elem_at(src, i)?;
            let leaves = f(s, x)?;
            Ok(Val { av: to_e, leaves })
        })?;
        Ok(v.leaves)
    }

    /// The array `to` whose element `i` has the leaves `f` gives for elements `i` of `x` and
    /// `y`, after checking that their lengths agree (the evaluator's error, naming `op`).
    pub(crate) fn zip_array(
        &mut self,
        op: &str,
        x: &Val,
        y: &Val,
        to: &Av,
        mut f: impl FnMut(&mut Self, Val, Val) -> R<Vec<Operand>>,
    ) -> R<Vec<Operand>> {
        let Av::Array(_, _, to_e) = to else {
            return self.unsupported("internal: a map making a value that is not an array");
        };
        let to_e = (**to_e).clone();
        if let (Av::Array(_, _, xe), Av::Array(_, _, ye)) = (&x.av, &y.av) {
            self.elements_map(&[xe, ye], &to_e)?;
        }
        if [&x.av, &y.av, to].iter().all(|v| soa_parts(v).is_none()) {
            return Ok(vec![self.zip_flat(op, x, y, &to_e, f)?]);
        }
        let n = self.array_len(x)?;
        let m = self.array_len(y)?;
        self.lengths_agree(op, &n, &m);
        let v = self.array_loop(&n, to, |s, i| {
            let a = s.elem_at(x, i)?;
            let b = s.elem_at(y, i)?;
            let leaves = f(s, a, b)?;
            Ok(Val { av: to_e, leaves })
        })?;
        Ok(v.leaves)
    }

    /// An element map whose image is no value, of elements that are values, fails on every
    /// element: only the evaluator reports that (an array of no elements, or the lazy zero of
    /// one, maps to one of none).
    fn elements_map(&self, from: &[&Av], to: &Av) -> R<()> {
        if *to == Av::Bottom && !from.iter().any(|e| super::arrays::no_value(e)) {
            if std::env::var_os("VLAD_C_DEBUG").is_some() {
                eprintln!("an element map of {from:?} fails");
            }
            return self.unsupported("internal: an AD operator fails on an array's elements");
        }
        Ok(())
    }

    /// The array value `a` as one flat array of its elements (a forward array's two arrays
    /// zipped): what boxing it by reference needs.
    pub(crate) fn flat_of(&mut self, a: &Val) -> R<Operand> {
        if soa_parts(&a.av).is_none() {
            return Ok(a.leaves[0].clone());
        }
        let Av::Array(_, _, e) = &a.av else {
            unreachable!("checked")
        };
        let e = (**e).clone();
        let n = self.array_len(a)?;
        self.flat_loop(&n, &e, |s, i| Ok(s.elem_at(a, i)?.leaves))
    }
}
