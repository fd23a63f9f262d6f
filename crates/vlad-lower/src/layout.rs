//! Layouts: the leaves of an abstract value, and the conversions between layouts (`coerce`),
//! boxing (`boxed_val`) and lazy zeros computed (`force`).

use super::{flow_error, Lowerer, Operand, Val, R};
use std::rc::Rc;
use vlad_core::{Prim, Tag};
use vlad_flow::Av;
use vlad_ir::{Builder, GlobalId, MapKind, Op, Rt, Stmt, Ty};

/// The primitive whose abstract version gives the map's result.
pub(crate) fn map_prim(kind: MapKind) -> Option<Prim> {
    Some(match kind {
        MapKind::Tag(Tag::Perturbation) => Prim::Perturb,
        MapKind::Tag(Tag::Sensitivity) => Prim::Sensitize,
        MapKind::Tag(Tag::Reverse) => Prim::StarJ,
        MapKind::Untag(Tag::Perturbation) => Prim::Unperturb,
        MapKind::Untag(Tag::Sensitivity) => Prim::Unsensitize,
        MapKind::Untag(Tag::Reverse) => Prim::StarJInverse,
        MapKind::Split(false) => Prim::Primal,
        MapKind::Split(true) => Prim::Tangent,
        MapKind::SZero => Prim::SZero,
        MapKind::ShallowPrimal => Prim::ShallowPrimal,
        MapKind::Bundle => Prim::Bundle,
        // Forward tags come from `bundle`; the full zero is not one primitive.
        MapKind::Tag(Tag::Forward) | MapKind::Untag(Tag::Forward) | MapKind::ZeroSensitivity => {
            return None
        }
    })
}

/// Known values boxed at run time are built part by part in the code: a bound on its size.
const MAX_BOXED_CONSTANT: usize = 4096;

impl Lowerer<'_, '_> {
    /// The leaf types of a value of `av`.
    pub(crate) fn layout(&self, av: &Av) -> R<Vec<Ty>> {
        let mut out = Vec::new();
        self.visit_leaves(av, &mut |t, _| {
            out.push(t);
            Ok(())
        })?;
        Ok(out)
    }

    /// Calls `f` on each leaf of `av`'s layout, in order, with the value the leaf holds.
    fn visit_leaves(&self, av: &Av, f: &mut dyn FnMut(Ty, &Av) -> R<()>) -> R<()> {
        match av {
            Av::Bottom | Av::Nil | Av::Bool(Some(_)) | Av::Real(Some(_)) | Av::Prim(_) => {}
            Av::Bool(None) => f(Ty::Bool, av)?,
            Av::Real(None) => f(Ty::F64, av)?,
            Av::Pair(_, a, b) | Av::Bundle(a, b) => {
                self.visit_leaves(a, f)?;
                self.visit_leaves(b, f)?;
            }
            Av::Closure(_, env) => {
                for x in env.iter() {
                    self.visit_leaves(x, f)?;
                }
            }
            Av::Tagged(_, x) => self.visit_leaves(x, f)?,
            // A lazy zero keeps the leaves of the parts of its reverse value whose zeros are not
            // known at compile time (boxed parts): `force` makes the zero from them.
            Av::Zero(of) => {
                if !static_zero(of) {
                    self.visit_leaves(of, f)?;
                }
            }
            // The reverse array, the index, the element's sensitivity.
            Av::OneHot(of, x) => {
                self.visit_leaves(of, f)?;
                f(Ty::F64, av)?;
                self.visit_leaves(x, f)?;
            }
            // The one-hot part, then the dense part.
            Av::Sum(o, d) => {
                self.visit_leaves(o, f)?;
                self.visit_leaves(d, f)?;
            }
            // Which alternative it is (true: the lazy zero), then the leaves of each.
            Av::OrZero(of, x) => {
                f(Ty::Bool, av)?;
                if !static_zero(of) {
                    self.visit_leaves(of, f)?;
                }
                self.visit_leaves(x, f)?;
            }
            // A flat array (`arrays.rs`), tagged or not: its elements in the layout of their
            // shape; a forward array, the array of its primals and that of its tangents
            // (`soa.rs`).
            Av::Array(_, _, e) => match super::soa::soa_parts(av) {
                Some((p, q)) => {
                    self.visit_leaves(&p, f)?;
                    self.visit_leaves(&q, f)?;
                }
                None => {
                    let slots = self.layout(&e.shape())?;
                    f(Ty::Array(slots.into()), av)?
                }
            },
            Av::Dyn(_) => f(Ty::Boxed, av)?,
        }
        Ok(())
    }

    /// The leaves of the parts `avs` of a value whose leaves are `leaves`, in order.
    pub(crate) fn split(&self, avs: &[&Av], leaves: &[Operand]) -> R<Vec<Vec<Operand>>> {
        let mut out = Vec::new();
        let mut at = 0;
        for av in avs {
            let n = self.layout(av)?.len();
            if at + n > leaves.len() {
                return self.unsupported("internal: a value with too few leaves");
            }
            out.push(leaves[at..at + n].to_vec());
            at += n;
        }
        Ok(out)
    }

    /// The alternatives of a value of `Av::OrZero`: the test that it is the lazy zero, the lazy
    /// zero, and the other value (each alternative's leaves hold garbage when it is not the one).
    pub(crate) fn or_zero_parts(&mut self, v: &Val) -> R<(Operand, Val, Val)> {
        let Av::OrZero(of, x) = &v.av else {
            return self.unsupported("internal: the alternatives of a value that has none");
        };
        let zero = Av::Zero(of.clone());
        let parts = self.split(&[&Av::Bool(None), &zero, x], &v.leaves)?;
        Ok((
            parts[0][0].clone(),
            Val {
                av: zero,
                leaves: parts[1].clone(),
            },
            Val {
                av: (**x).clone(),
                leaves: parts[2].clone(),
            },
        ))
    }

    /// A value of `Av::OrZero` converted to `to` (a wider value, or the value an operation
    /// sees when it forces it): each alternative converted in its own branch, so that the
    /// leaves of the alternative it is not are never read.
    fn coerce_or_zero(&mut self, v: &Val, to: &Av) -> R<Vec<Operand>> {
        let (flag, zero, x) = self.or_zero_parts(v)?;
        // The zero stays lazy where `to` can hold one (`coerce` forces it otherwise).
        let r = self.branch(super::Cond::Test(flag), to, |_, then| {
            Ok(if then { zero.clone() } else { x.clone() })
        })?;
        Ok(r.leaves)
    }

    /// A lazy zero computed one level (the evaluator's `force_zero`).
    pub(crate) fn force(&mut self, v: Val) -> R<Val> {
        if let Av::OneHot(..) = &v.av {
            return self.materialize_onehot(&v, false);
        }
        if let Av::Sum(..) = &v.av {
            return self.force_sum(&v);
        }
        // A perturbed one-hot: the perturbation array.
        if let Av::Tagged(vlad_core::Tag::Perturbation, x) = &v.av {
            if let Av::OneHot(..) = &**x {
                let d = self.materialize_onehot(
                    &Val {
                        av: (**x).clone(),
                        leaves: v.leaves.clone(),
                    },
                    false,
                )?;
                let av = self.prim_result(Prim::Perturb, &d.av)?;
                let leaves = self.tag_leaves(&d, vlad_core::Tag::Perturbation)?;
                return Ok(Val { av, leaves });
            }
        }
        // A bundle of two one-hots: the forward array they stand for.
        if let Av::Bundle(p, t) = &v.av {
            if vlad_flow::is_onehot_bundle(p, t) {
                let parts = self.raw_parts(&v, &[p, t])?;
                let x = self.force(parts[0].clone())?;
                let y = self.force(parts[1].clone())?;
                let av = self.prim_result(Prim::Bundle, &Av::pair(x.av.clone(), y.av.clone()))?;
                let leaves = self.bundle(&x, &y)?;
                return Ok(Val { av, leaves });
            }
        }
        if let Av::OrZero(..) = &v.av {
            let forced = self.an.force_av(&v.av).map_err(flow_error)?;
            let leaves = self.coerce_or_zero(&v, &forced)?;
            return Ok(Val { av: forced, leaves });
        }
        let Av::Zero(of) = &v.av else {
            return Ok(v);
        };
        let forced = self.an.force_av(&v.av).map_err(flow_error)?;
        if static_zero(of) {
            return Ok(Val::known(forced));
        }
        let of = Val {
            av: (**of).clone(),
            leaves: v.leaves.clone(),
        };
        let leaves = match &of.av {
            // A zero the analysis only knows as boxed (the zero of a reverse value with boxed
            // parts): the runtime computes it from the boxed reverse value.
            _ if matches!(forced, Av::Dyn(_)) => {
                self.map_kinds.insert(MapKind::ZeroSensitivity);
                let b = self.boxed_val(&of)?;
                vec![self.rt(Ty::Boxed, Rt::ZeroSens, vec![b])]
            }
            // A pair or closure of zeros of the parts: each part keeps its leaves if its own
            // zero is not known.
            Av::Pair(..) | Av::Closure(..) => self
                .components(&of, true)?
                .into_iter()
                .flat_map(|p| {
                    if static_zero(&p.av) {
                        Vec::new()
                    } else {
                        p.leaves
                    }
                })
                .collect(),
            // An array of the zeros of the elements, of the reverse array's length: the same
            // array where the elements' zeros need their leaves.
            Av::Array(_, _, e) => {
                let Av::Array(_, _, ze) = &forced else {
                    return self.unsupported("internal: the lazy zero of an array");
                };
                let keep = !static_zero(e);
                let src = of.leaves[0].clone();
                vec![self.map_flat(&src, e, &ze.clone(), |_, x| {
                    Ok(if keep { x.leaves } else { Vec::new() })
                })?]
            }
            _ if self.layout(&forced)?.is_empty() => Vec::new(),
            // A reverse scalar: the sensitivity-tagged zero of its primal.
            Av::Tagged(Tag::Reverse, x) => {
                let x = Val {
                    av: (**x).clone(),
                    leaves: of.leaves.clone(),
                };
                self.zero_leaves(&x, true)?
            }
            _ => {
                if std::env::var_os("VLAD_C_DEBUG").is_some() {
                    eprintln!("lazy zero of {:?}\n  forced {forced:?}", of.av);
                }
                return self.unsupported("a lazy zero of a boxed scalar");
            }
        };
        if leaves.len() != self.layout(&forced)?.len() {
            return self.unsupported("internal: a lazy zero of another layout");
        }
        Ok(Val { av: forced, leaves })
    }

    /// `v` in the layout of `to`, an abstract value that contains `v.av`: constants
    /// materialised, parts boxed.
    pub(crate) fn coerce(&mut self, v: Val, to: &Av) -> R<Val> {
        if v.av == *to {
            return Ok(v);
        }
        let leaves = self.coerce_leaves(&v.av, &v.leaves, to)?;
        Ok(Val {
            av: to.clone(),
            leaves,
        })
    }

    /// Leaves in the layout of `av` whose values never matter (code never reached, or a
    /// known zero that does not depend on them).
    pub(crate) fn placeholders(&self, av: &Av) -> R<Vec<Operand>> {
        Ok(self.layout(av)?.iter().map(Operand::placeholder).collect())
    }

    pub(crate) fn coerce_leaves(
        &mut self,
        from: &Av,
        leaves: &[Operand],
        to: &Av,
    ) -> R<Vec<Operand>> {
        if from == to {
            return Ok(leaves.to_vec());
        }
        if *from == Av::Bottom {
            return self.placeholders(to);
        }
        Ok(match (from, to) {
            // Into a lazy zero or a value: which one it is, then the leaves of both.
            (Av::OrZero(..), Av::OrZero(..)) | (Av::OrZero(..), Av::Dyn(_)) => {
                let v = Val {
                    av: from.clone(),
                    leaves: leaves.to_vec(),
                };
                self.coerce_or_zero(&v, to)?
            }
            (Av::OneHot(a, x), Av::OneHot(b, y)) => {
                let parts = self.split(&[a, &Av::real(), x], leaves)?;
                let mut out = self.coerce_leaves(a, &parts[0], b)?;
                out.extend(parts[1].clone());
                out.extend(self.coerce_leaves(x, &parts[2], y)?);
                out
            }
            (Av::Bundle(p, t), Av::Array(..)) if vlad_flow::is_onehot_bundle(p, t) => {
                let v = Val {
                    av: from.clone(),
                    leaves: leaves.to_vec(),
                };
                let d = self.force(v)?;
                self.coerce_leaves(&d.av, &d.leaves, to)?
            }
            (Av::OneHot(..), Av::Array(..)) => {
                let v = Val {
                    av: from.clone(),
                    leaves: leaves.to_vec(),
                };
                let d = self.materialize_onehot(&v, false)?;
                self.coerce_leaves(&d.av, &d.leaves, to)?
            }
            // Sums part by part; a one-hot or an array as a sum without the other part.
            (Av::Sum(o, d), Av::Sum(p, e)) => {
                let parts = self.split(&[o, d], leaves)?;
                let mut out = self.coerce_leaves(o, &parts[0], p)?;
                out.extend(self.coerce_leaves(d, &parts[1], e)?);
                out
            }
            (Av::OneHot(..), Av::Sum(p, e)) => {
                let mut out = self.coerce_leaves(from, leaves, p)?;
                out.extend(self.absent_part(e)?);
                out
            }
            (Av::Array(..), Av::Sum(p, e)) => {
                let mut out = self.absent_part(p)?;
                out.extend(self.coerce_leaves(from, leaves, e)?);
                out
            }
            (Av::Sum(..), Av::Array(..)) => {
                let v = Val {
                    av: from.clone(),
                    leaves: leaves.to_vec(),
                };
                let d = self.force_sum(&v)?;
                self.coerce_leaves(&d.av, &d.leaves, to)?
            }
            (Av::Zero(_), Av::OrZero(of, x)) => {
                let zero = Av::Zero(of.clone());
                let mut out = vec![Operand::Bool(true)];
                out.extend(self.coerce_leaves(from, leaves, &zero)?);
                out.extend(self.placeholders(x)?);
                out
            }
            (_, Av::OrZero(of, x)) if !matches!(from, Av::Dyn(_)) => {
                let mut out = vec![Operand::Bool(false)];
                out.extend(self.placeholders(&Av::Zero(of.clone()))?);
                out.extend(self.coerce_leaves(from, leaves, x)?);
                out
            }
            (_, Av::Dyn(_)) => {
                let b = self.boxed_val(&Val {
                    av: from.clone(),
                    leaves: leaves.to_vec(),
                })?;
                vec![b]
            }
            (Av::Real(Some(x)), Av::Real(None)) => vec![Operand::F64(x.get())],
            (Av::Bool(Some(b)), Av::Bool(None)) => vec![Operand::Bool(*b)],
            (Av::Pair(t, a, b), Av::Pair(u, c, d)) if t == u => {
                let parts = self.split(&[a, b], leaves)?;
                let mut out = self.coerce_leaves(a, &parts[0], c)?;
                out.extend(self.coerce_leaves(b, &parts[1], d)?);
                out
            }
            (Av::Bundle(a, b), Av::Bundle(c, d)) => {
                let parts = self.split(&[a, b], leaves)?;
                let mut out = self.coerce_leaves(a, &parts[0], c)?;
                out.extend(self.coerce_leaves(b, &parts[1], d)?);
                out
            }
            (Av::Tagged(t, x), Av::Tagged(u, y)) if t == u => self.coerce_leaves(x, leaves, y)?,
            (Av::Array(t, _, x), Av::Array(u, _, y)) if t == u => {
                match (super::soa::soa_parts(from), super::soa::soa_parts(to)) {
                    (None, None) => self.coerce_array(&leaves[0], x, y)?,
                    // The two arrays of a forward array, each converted.
                    (Some((fp, fq)), Some((tp, tq))) => {
                        let parts = self.split(&[&fp, &fq], leaves)?;
                        let mut out = self.coerce_leaves(&fp, &parts[0], &tp)?;
                        out.extend(self.coerce_leaves(&fq, &parts[1], &tq)?);
                        out
                    }
                    _ => {
                        let v = Val {
                            av: from.clone(),
                            leaves: leaves.to_vec(),
                        };
                        let y = (**y).clone();
                        self.map_array(&v, to, |s, e| s.coerce_leaves(x, &e.leaves, &y))?
                    }
                }
            }
            (Av::Closure(c, e1), Av::Closure(d, e2)) if c == d && e1.len() == e2.len() => {
                let parts = self.split(&e1.iter().collect::<Vec<_>>(), leaves)?;
                let mut out = Vec::new();
                for ((x, y), l) in e1.iter().zip(e2.iter()).zip(parts) {
                    out.extend(self.coerce_leaves(x, &l, y)?);
                }
                out
            }
            // Two lazy zeros: the reverse value they stand for is coerced (its zero is the
            // same), so the zero stays lazy. Leaves whose zero is known are not kept.
            (Av::Zero(a), Av::Zero(c)) => {
                if static_zero(c) {
                    return Ok(Vec::new());
                }
                let a_leaves = if static_zero(a) {
                    self.placeholders(a)?
                } else {
                    leaves.to_vec()
                };
                self.coerce_leaves(a, &a_leaves, c)?
            }
            (Av::Zero(_), _) => {
                let forced = self.force(Val {
                    av: from.clone(),
                    leaves: leaves.to_vec(),
                })?;
                self.coerce_leaves(&forced.av, &forced.leaves, to)?
            }
            _ => {
                if std::env::var_os("VLAD_C_DEBUG").is_some() {
                    eprintln!("coerce {from:?}\n  to {to:?}");
                }
                return self.unsupported(format!(
                    "a value that changes layout ({} to {})",
                    short(from),
                    short(to)
                ));
            }
        })
    }

    /// `boxed_val` for printing or an error message only.
    pub(crate) fn boxed_for_display(&mut self, v: &Val) -> R<Operand> {
        let outer = std::mem::replace(&mut self.for_display, true);
        let r = self.boxed_val(v);
        self.for_display = outer;
        r
    }

    /// `v` as a boxed runtime value.
    ///
    /// A value known in full at compile time is boxed once, before the program starts, into a
    /// global (`vl_kN`): boxed objects are never mutated, so every use can share it, and a
    /// constant (a tagged `()` that a pattern checks, a closure without free variables) does not
    /// cost an allocation each time its code runs.
    pub(crate) fn boxed_val(&mut self, v: &Val) -> R<Operand> {
        if !v.leaves.is_empty()
            || self.for_display
            || matches!(v.av, Av::Nil | Av::Bool(_) | Av::Bottom | Av::Dyn(_))
        {
            return self.boxed_val_now(v);
        }
        if let Some(g) = self.constants.get(&v.av) {
            return Ok(Operand::Global(*g));
        }
        let g = self.detached(|s| {
            let b = s.boxed_val_now(v)?;
            let g = s.global(format!("vl_k{}", s.constants.len()), Ty::Boxed);
            s.b.push(Stmt::SetGlobal(g, b));
            Ok(g)
        })?;
        self.constants.insert(v.av.clone(), g);
        Ok(Operand::Global(g))
    }

    /// A new global.
    pub(crate) fn global(&mut self, name: String, ty: Ty) -> GlobalId {
        self.out.globals.push(vlad_ir::Global { name, ty });
        GlobalId(self.out.globals.len() as u32 - 1)
    }

    /// Runs `f` in the initialisation function (code run once, at start-up): `f`'s result. A
    /// constant inside a constant is built there first, before the one that holds it.
    pub(crate) fn detached<T>(&mut self, f: impl FnOnce(&mut Self) -> R<T>) -> R<T> {
        if self.in_init {
            return f(self);
        }
        let init = std::mem::take(&mut self.init);
        let outer = std::mem::replace(&mut self.b, init);
        self.in_init = true;
        let r = f(self);
        self.in_init = false;
        self.init = std::mem::replace(&mut self.b, outer);
        r
    }

    /// Runs `f` in a function of its own (built by `f` in `self.b`): `f`'s result and the
    /// builder.
    pub(crate) fn in_function<T>(&mut self, f: impl FnOnce(&mut Self) -> R<T>) -> (R<T>, Builder) {
        let outer = std::mem::take(&mut self.b);
        let key = std::mem::replace(&mut self.key, usize::MAX);
        let r = f(self);
        self.key = key;
        let built = std::mem::replace(&mut self.b, outer);
        (r, built)
    }

    fn boxed_val_now(&mut self, v: &Val) -> R<Operand> {
        if v.leaves.is_empty() && !matches!(v.av, Av::Closure(..)) {
            let mut budget = MAX_BOXED_CONSTANT;
            if !small(&v.av, &mut budget) {
                return self.unsupported(format!(
                    "a constant of more than {MAX_BOXED_CONSTANT} parts to box"
                ));
            }
        }
        let (rt, args) = match &v.av {
            Av::Dyn(_) => return Ok(v.leaves[0].clone()),
            Av::Bottom | Av::Nil => (Rt::Nil, vec![]),
            Av::Bool(Some(b)) => (Rt::BoxBool, vec![Operand::Bool(*b)]),
            Av::Bool(None) => (Rt::BoxBool, vec![v.leaves[0].clone()]),
            Av::Real(Some(x)) => (Rt::BoxReal, vec![Operand::F64(x.get())]),
            Av::Real(None) => (Rt::BoxReal, vec![v.leaves[0].clone()]),
            Av::Prim(p) => (
                Rt::BoxPrim,
                vec![Operand::I64(super::prim_index(*p) as i64)],
            ),
            Av::Bundle(a, b) if vlad_flow::is_onehot_bundle(a, b) => {
                let d = self.force(v.clone())?;
                return self.boxed_val(&d);
            }
            Av::Pair(_, a, b) | Av::Bundle(a, b) => {
                let ps = self.raw_parts(v, &[a, b])?;
                // The cdr first: a list is boxed from its end, so that each boxed element lives
                // only until its pair is made (boxing the cars first kept all of them live at
                // once, which made the C compiler's time grow with the square of the length).
                let y = self.boxed_val(&ps[1])?;
                let x = self.boxed_val(&ps[0])?;
                match &v.av {
                    Av::Pair(t, ..) => (Rt::BoxPair, vec![Operand::I64(t.bits() as i64), x, y]),
                    _ => (Rt::BoxBundle, vec![x, y]),
                }
            }
            Av::Tagged(t, x) => {
                let inner = self.boxed_val(&Val {
                    av: (**x).clone(),
                    leaves: v.leaves.clone(),
                })?;
                (Rt::BoxTagged, vec![Operand::I64(*t as i64), inner])
            }
            Av::Closure(c, env) => {
                let Some(summary) = self.boxed.envs.get(c).cloned() else {
                    if !self.for_display {
                        return self.unsupported("boxing a closure whose code is never boxed");
                    }
                    // Boxed only to be printed or described: no environment.
                    return Ok(self.rt(
                        Ty::Boxed,
                        Rt::BoxClosure,
                        vec![Operand::I64(c.0 as i64), Operand::I64(0)],
                    ));
                };
                let parts = self.split(&env.iter().collect::<Vec<_>>(), &v.leaves)?;
                let mut slots = Vec::new();
                for ((x, want), l) in env.iter().zip(summary.iter()).zip(parts) {
                    slots.extend(self.coerce_leaves(x, &l, want)?);
                }
                let t = self.rt(
                    Ty::Boxed,
                    Rt::BoxClosure,
                    vec![Operand::I64(c.0 as i64), Operand::I64(slots.len() as i64)],
                );
                for (i, s) in slots.into_iter().enumerate() {
                    self.b.push(Stmt::SetField {
                        obj: t.clone(),
                        slot: i as u32,
                        value: s,
                    });
                }
                return Ok(t);
            }
            // The evaluator keeps a lazy zero lazy: boxed, it is flagged as one (`vl_as_zero`)
            // so that `plus` returns the other operand, as the evaluator's does. A zero the
            // runtime computed (`vl_zero_sens`) is flagged already.
            Av::Zero(_) => {
                let forced = self.force(v.clone())?;
                let b = self.boxed_val(&forced)?;
                if matches!(forced.av, Av::Dyn(_)) {
                    return Ok(b);
                }
                return Ok(self.rt(Ty::Boxed, Rt::AsZero, vec![b]));
            }
            Av::Array(t, _, e) => {
                let flat = self.flat_of(v)?;
                return self.box_array(&flat, *t, e);
            }
            Av::OrZero(..) => {
                let to = v.av.boxed(&mut vlad_flow::domain::Boxes::default());
                return Ok(self.coerce_or_zero(v, &to)?.swap_remove(0));
            }
            Av::OneHot(..) => return self.box_onehot(v),
            Av::Sum(..) => return self.box_sum(v),
        };
        Ok(self.rt(Ty::Boxed, rt, args))
    }

    /// The parts of `v` as they are (lazy zeros not computed).
    pub(crate) fn raw_parts(&mut self, v: &Val, avs: &[&Av]) -> R<Vec<Val>> {
        let parts = self.split(avs, &v.leaves)?;
        Ok(avs
            .iter()
            .zip(parts)
            .map(|(av, leaves)| Val {
                av: (*av).clone(),
                leaves,
            })
            .collect())
    }

    pub(crate) fn parts(&mut self, v: &Val, avs: &[&Av]) -> R<Vec<Val>> {
        let parts = self.split(avs, &v.leaves)?;
        let mut out = Vec::new();
        for (av, leaves) in avs.iter().zip(parts) {
            out.push(self.force(Val {
                av: (*av).clone(),
                leaves,
            })?);
        }
        Ok(out)
    }

    /// The parts of a pair, bundle or tagged value, or a closure's environment (lazy zeros in
    /// them computed if `forced`).
    pub(crate) fn components(&mut self, v: &Val, forced: bool) -> R<Vec<Val>> {
        let avs: Vec<Av> = match &v.av {
            Av::Pair(_, a, d) | Av::Bundle(a, d) => vec![(**a).clone(), (**d).clone()],
            Av::Tagged(_, x) => vec![(**x).clone()],
            Av::Closure(_, env) => env.to_vec(),
            _ => return self.unsupported("internal: the parts of a scalar"),
        };
        let avs: Vec<&Av> = avs.iter().collect();
        if forced {
            self.parts(v, &avs)
        } else {
            self.raw_parts(v, &avs)
        }
    }

    /// A structural map over two values of one structure (`bundle`, `plus`): the leaves `f`
    /// gives for each pair of corresponding parts, in order.
    pub(crate) fn zip_parts(
        &mut self,
        a: &Val,
        b: &Val,
        forced: bool,
        mut f: impl FnMut(&mut Self, &Val, &Val) -> R<Vec<Operand>>,
    ) -> R<Vec<Operand>> {
        let xs = self.components(a, forced)?;
        let ys = self.components(b, forced)?;
        if xs.len() != ys.len() {
            return self.unsupported("internal: a structural map of two different structures");
        }
        let mut out = Vec::new();
        for (x, y) in xs.iter().zip(&ys) {
            out.extend(f(self, x, y)?);
        }
        Ok(out)
    }

    /// A structural map over the parts of a pair, bundle or closure (its environment): the
    /// leaves `f` gives for each part, in order. The parts are given as they are: each map
    /// computes a lazy zero (or one-hot) where it looks inside, as the analysis's maps do.
    pub(crate) fn map_parts(
        &mut self,
        v: &Val,
        mut f: impl FnMut(&mut Self, &Val) -> R<Vec<Operand>>,
    ) -> R<Vec<Operand>> {
        let parts = self.components(v, false)?;
        let mut out = Vec::new();
        for x in &parts {
            out.extend(f(self, x)?);
        }
        Ok(out)
    }

    /// The closure of code `c` held by the boxed value `var`, its leaves in the layout of the
    /// code's environment summary.
    pub(crate) fn unpack_closure(
        &mut self,
        c: vlad_flow::CodeId,
        summary: &Rc<[Av]>,
        var: &Operand,
    ) -> R<Val> {
        let mut leaves = Vec::new();
        let mut slot = 0;
        for s in summary.iter() {
            for ty in self.layout(s)? {
                let t = self.b.let1(
                    ty.clone(),
                    "u",
                    Op::Field {
                        obj: var.clone(),
                        slot,
                        ty,
                    },
                );
                leaves.push(Operand::Var(t));
                slot += 1;
            }
        }
        Ok(Val {
            av: Av::Closure(c, summary.clone()),
            leaves,
        })
    }
}

/// `v` has at most `budget` parts (which it uses up).
fn small(v: &Av, budget: &mut usize) -> bool {
    if *budget == 0 {
        return false;
    }
    *budget -= 1;
    match v {
        Av::Pair(_, a, b) | Av::Bundle(a, b) => small(a, budget) && small(b, budget),
        Av::Tagged(_, x) | Av::Zero(x) => small(x, budget),
        Av::OrZero(z, x) | Av::OneHot(z, x) | Av::Sum(z, x) => small(z, budget) && small(x, budget),
        Av::Closure(_, env) => env.iter().all(|x| small(x, budget)),
        _ => true,
    }
}

/// The printed form of a known untagged value (the evaluator's `print`), `None` for values
/// with unknown or tagged parts.
pub(crate) fn known_text(v: &Av) -> Option<String> {
    use std::fmt::Write as _;
    fn go(v: &Av, s: &mut String) -> bool {
        match v {
            Av::Nil => s.push_str("()"),
            Av::Bool(Some(b)) => s.push_str(if *b { "#t" } else { "#f" }),
            Av::Real(Some(x)) => s.push_str(&vlad_core::number::format_real(x.get())),
            Av::Prim(p) => {
                let _ = write!(s, "<procedure:{}>", p.name());
            }
            Av::Closure(..) => s.push_str("<procedure>"),
            Av::Pair(t, _, _) if t.is_empty() => {
                s.push('(');
                let mut v = v;
                while let Av::Pair(_, a, d) = v {
                    if !go(a, s) {
                        return false;
                    }
                    match &**d {
                        Av::Pair(t, ..) if t.is_empty() => {
                            s.push(' ');
                            v = d;
                        }
                        Av::Nil => break,
                        other => {
                            s.push_str(" . ");
                            if !go(other, s) {
                                return false;
                            }
                            break;
                        }
                    }
                }
                s.push(')');
            }
            _ => return false,
        }
        true
    }
    let mut s = String::new();
    go(v, &mut s).then_some(s)
}

/// Whether an array is part of `v` (outside boxed parts).
pub(crate) fn has_array(v: &Av) -> bool {
    match v {
        Av::Array(..) => true,
        Av::Pair(_, a, b) | Av::Bundle(a, b) => has_array(a) || has_array(b),
        Av::Closure(_, env) => env.iter().any(has_array),
        Av::Tagged(_, x) | Av::Zero(x) => has_array(x),
        Av::OrZero(z, x) => has_array(z) || has_array(x),
        Av::OneHot(..) | Av::Sum(..) => true,
        _ => false,
    }
}

/// Whether a scalar-like value (a bundle or tagged value) has a boxed part.
pub(crate) fn has_boxed_part(av: &Av) -> bool {
    match av {
        Av::Dyn(_) => true,
        Av::Bundle(a, b) => has_boxed_part(a) || has_boxed_part(b),
        Av::Tagged(_, x) => has_boxed_part(x),
        _ => false,
    }
}

/// A lazy zero of this value is known at compile time (it has no arrays, boxed parts or
/// unknown booleans: zeros keep booleans).
pub(crate) fn static_zero(of: &Av) -> bool {
    match of {
        Av::Array(..)
        | Av::Dyn(_)
        | Av::Bool(None)
        | Av::OrZero(..)
        | Av::OneHot(..)
        | Av::Sum(..) => false,
        Av::Pair(_, a, b) | Av::Bundle(a, b) => static_zero(a) && static_zero(b),
        Av::Closure(_, env) => env.iter().all(static_zero),
        Av::Tagged(_, x) | Av::Zero(x) => static_zero(x),
        _ => true,
    }
}

fn short(v: &Av) -> &'static str {
    match v {
        Av::Bottom => "no value",
        Av::Nil => "()",
        Av::Bool(_) => "a boolean",
        Av::Real(_) => "a real",
        Av::Prim(_) => "a primitive",
        Av::Pair(..) => "a pair",
        Av::Closure(..) => "a closure",
        Av::Array(..) => "an array",
        Av::Bundle(..) => "a forward value",
        Av::Tagged(..) => "a tagged value",
        Av::Zero(_) => "a zero sensitivity",
        Av::OrZero(..) => "a zero sensitivity or a value",
        Av::OneHot(..) => "a one-hot sensitivity",
        Av::Sum(..) => "a one-hot plus a dense sensitivity",
        Av::Dyn(_) => "a boxed value",
    }
}
