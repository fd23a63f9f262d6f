//! Primitives: arithmetic and comparisons on leaves, the predicates, I/O, and the AD operators
//! as maps over layouts.

use super::layout::{has_array, has_boxed_part};
use super::{Cond, Lowerer, Val, R};
use vlad_core::{Prim, Tag};
use vlad_flow::Av;
use vlad_ir::{BinOp, MapKind, ObjKind, Op, Operand, Rt, Stmt, Ty, UnOp};

impl Lowerer<'_, '_> {
    /// The real operand `v` (`None`: it cannot be a real).
    fn real_operand(&mut self, v: &Val, p: Prim, site: i64) -> Option<Operand> {
        match &v.av {
            Av::Real(Some(x)) => Some(Operand::F64(x.get())),
            Av::Real(None) => Some(v.leaves[0].clone()),
            Av::Dyn(_) => Some(self.rt(
                Ty::F64,
                Rt::ToReal,
                vec![
                    v.leaves[0].clone(),
                    Operand::I64(site),
                    Operand::Str(p.name().into()),
                ],
            )),
            _ => None,
        }
    }

    /// The two parts of a primitive's argument pair.
    pub(crate) fn two(&mut self, a: &Val, site: i64) -> R<Option<(Val, Val)>> {
        Ok(match self.two_raw(a, site)? {
            Some((x, y)) => Some((self.force(x)?, self.force(y)?)),
            None => None,
        })
    }

    /// `two` without computing lazy zeros in the parts (`plus` takes them as they are).
    pub(crate) fn two_raw(&mut self, a: &Val, site: i64) -> R<Option<(Val, Val)>> {
        let a = self.force(a.clone())?;
        Ok(match &a.av {
            Av::Pair(t, x, y) if t.is_empty() => {
                let mut ps = self.raw_parts(&a, &[x, y])?;
                let y = ps.pop().expect("two parts");
                let x = ps.pop().expect("two parts");
                Some((x, y))
            }
            Av::Dyn(_) => {
                let (car, cdr) = self.car_cdr(&a.leaves[0], 0, site);
                Some((
                    Val {
                        av: a.av.clone(),
                        leaves: vec![car],
                    },
                    Val {
                        av: a.av.clone(),
                        leaves: vec![cdr],
                    },
                ))
            }
            _ => None,
        })
    }

    pub(crate) fn prim(&mut self, p: Prim, a: Val, out: &Av, site: i64) -> R<Val> {
        // `get` checks its index even where the element is known: an index out of range is an
        // error, not the known element.
        let pure_known = !matches!(
            p,
            Prim::ReadReal | Prim::WriteReal | Prim::Write | Prim::Get
        ) && *out != Av::Bottom
            && self.layout(out)?.is_empty();
        if pure_known {
            return Ok(Val::known(out.clone()));
        }
        let real = |leaf: Operand| Val {
            av: Av::real(),
            leaves: vec![leaf],
        };
        let boolean = |leaf: Operand| Val {
            av: Av::Bool(None),
            leaves: vec![leaf],
        };
        let v = match p {
            _ if p.is_binary_real() || p.is_comparison() => {
                let Some((x, y)) = self.two(&a, site)? else {
                    return self.prim_error(p, &a, site);
                };
                let is_dyn = |v: &Val| matches!(v.av, Av::Dyn(_));
                let can_be_real = |v: &Val| matches!(v.av, Av::Real(_) | Av::Dyn(_));
                if !can_be_real(&x) || !can_be_real(&y) || is_dyn(&x) || is_dyn(&y) {
                    // The evaluator's message names both operands.
                    let bx = self.boxed_for_display(&x)?;
                    let by = self.boxed_for_display(&y)?;
                    let fail = Stmt::Let(
                        Vec::new(),
                        Op::Rt(
                            Rt::FailTwo,
                            vec![
                                Operand::I64(site),
                                Operand::Str(p.name().into()),
                                bx.clone(),
                                by.clone(),
                            ],
                        ),
                    );
                    if !can_be_real(&x) || !can_be_real(&y) {
                        self.b.push(fail);
                        return Ok(Val::known(Av::Bottom));
                    }
                    let mut test: Option<Operand> = None;
                    for (v, b) in [(&x, &bx), (&y, &by)] {
                        if is_dyn(v) {
                            let k = self.let1(Ty::Bool, Op::IsKind(b.clone(), ObjKind::Real));
                            test = Some(match test {
                                None => k,
                                Some(t) => self.let1(Ty::Bool, Op::Binary(BinOp::And, t, k)),
                            });
                        }
                    }
                    let test = test.expect("an operand is boxed");
                    self.b.push(Stmt::If {
                        cond: test,
                        then: Vec::new(),
                        els: vec![fail],
                    });
                }
                let (Some(xs), Some(ys)) = (
                    self.real_operand(&x, p, site),
                    self.real_operand(&y, p, site),
                ) else {
                    return self.prim_error(p, &a, site);
                };
                let op = match p {
                    Prim::Add => BinOp::FAdd,
                    Prim::Sub => BinOp::FSub,
                    Prim::Mul => BinOp::FMul,
                    Prim::Div => BinOp::FDiv,
                    Prim::Atan => BinOp::FAtan2,
                    Prim::Eq => BinOp::FEq,
                    Prim::Lt => BinOp::FLt,
                    Prim::Gt => BinOp::FGt,
                    Prim::Le => BinOp::FLe,
                    _ => BinOp::FGe,
                };
                if p.is_comparison() {
                    boolean(self.let1(Ty::Bool, Op::Binary(op, xs, ys)))
                } else {
                    real(self.let1(Ty::F64, Op::Binary(op, xs, ys)))
                }
            }
            _ if p.is_unary_real() => {
                let a = self.force(a)?;
                let Some(x) = self.real_operand(&a, p, site) else {
                    return self.prim_error(p, &a, site);
                };
                let f = match p {
                    Prim::Sqrt => UnOp::Sqrt,
                    Prim::Exp => UnOp::Exp,
                    Prim::Log => UnOp::Log,
                    Prim::Sin => UnOp::Sin,
                    Prim::Cos => UnOp::Cos,
                    _ => return self.unsupported(format!("the primitive `{}`", p.name())),
                };
                real(self.let1(Ty::F64, Op::Unary(f, x)))
            }
            Prim::ZeroTangent => {
                // Not a real: false (the rule then computes its tangent, and the arithmetic
                // reports what is wrong).
                let a = self.force(a)?;
                match &a.av {
                    Av::Real(Some(x)) => Val::known(Av::Bool(Some(x.get() == 0.0))),
                    Av::Real(None) => {
                        let x = a.leaves[0].clone();
                        boolean(self.let1(Ty::Bool, Op::Binary(BinOp::FEq, x, Operand::F64(0.0))))
                    }
                    Av::Dyn(_) => {
                        let b = a.leaves[0].clone();
                        let r = self.temps(&[Ty::Bool])[0];
                        self.b.push(Stmt::Set(r, Operand::Bool(false)));
                        let k = self.let1(Ty::Bool, Op::IsKind(b.clone(), ObjKind::Real));
                        let ((), then) = self.block(|s| {
                            let x = s.real_operand(&a, p, site).expect("a boxed value");
                            let z = s.let1(Ty::Bool, Op::Binary(BinOp::FEq, x, Operand::F64(0.0)));
                            s.b.push(Stmt::Set(r, z));
                            Ok(())
                        })?;
                        self.b.push(Stmt::If {
                            cond: k,
                            then,
                            els: Vec::new(),
                        });
                        boolean(Operand::Var(r))
                    }
                    _ => Val::known(Av::Bool(Some(false))),
                }
            }
            Prim::IsZero | Prim::IsPositive | Prim::IsNegative => {
                let a = self.force(a)?;
                let Some(x) = self.real_operand(&a, p, site) else {
                    return self.prim_error(p, &a, site);
                };
                let op = match p {
                    Prim::IsZero => BinOp::FEq,
                    Prim::IsPositive => BinOp::FGt,
                    _ => BinOp::FLt,
                };
                boolean(self.let1(Ty::Bool, Op::Binary(op, x, Operand::F64(0.0))))
            }
            Prim::IsNull | Prim::IsBoolean | Prim::IsReal | Prim::IsPair | Prim::IsProcedure => {
                let a = self.force(a)?;
                let Av::Dyn(_) = a.av else {
                    return self.unsupported("internal: an unknown type predicate");
                };
                let x = a.leaves[0].clone();
                let kind = |s: &mut Self, k: ObjKind| s.let1(Ty::Bool, Op::IsKind(x.clone(), k));
                boolean(match p {
                    Prim::IsNull => kind(self, ObjKind::Nil),
                    Prim::IsBoolean => kind(self, ObjKind::Bool),
                    Prim::IsReal => kind(self, ObjKind::Real),
                    Prim::IsPair => self.rt(Ty::Bool, Rt::IsPlainPair, vec![x.clone()]),
                    _ => {
                        let c = kind(self, ObjKind::Closure);
                        let q = kind(self, ObjKind::Prim);
                        self.let1(Ty::Bool, Op::Binary(BinOp::Or, c, q))
                    }
                })
            }
            Prim::Real => {
                let a = self.force(a)?;
                let Some(x) = self.real_operand(&a, p, site) else {
                    return self.prim_error(p, &a, site);
                };
                real(x)
            }
            Prim::ReadReal => real(self.rt(Ty::F64, Rt::ReadReal, vec![Operand::I64(site)])),
            Prim::WriteReal => {
                let a = self.force(a)?;
                let Some(x) = self.real_operand(&a, p, site) else {
                    return self.prim_error(p, &a, site);
                };
                real(self.rt(Ty::F64, Rt::WriteReal, vec![x]))
            }
            Prim::Write => {
                let b = self.boxed_for_display(&a)?;
                self.rt_effect(Rt::WriteValue, vec![b]);
                a
            }
            Prim::Get => self.get(a, out, site)?,
            Prim::OneHotSens => self.onehot(a, out)?,
            Prim::ListToArrayRev => self.list_to_array_rev(a, out)?,
            Prim::ArrayToListRev => self.array_to_list_rev(a, out, site)?,
            Prim::Dense => self.dense(a, out, site)?,
            Prim::ArrayLength => {
                let a = self.force(a)?;
                self.array_length(a, site)?
            }
            _ => return self.ad_prim(p, a, out),
        };
        if *out == Av::Bottom {
            return Ok(Val::known(Av::Bottom));
        }
        if self.layout(out)?.is_empty() {
            // Known at compile time (the effect of an I/O primitive happened above).
            return Ok(Val::known(out.clone()));
        }
        self.coerce(v, out)
    }

    /// A primitive applied to an argument it never accepts: the evaluator's error.
    fn prim_error(&mut self, p: Prim, a: &Val, site: i64) -> R<Val> {
        let b = self.boxed_for_display(a)?;
        let what = if p.is_binary_real() || p.is_comparison() {
            "two reals"
        } else {
            "a real"
        };
        self.rt_effect(
            Rt::FailValue,
            vec![
                Operand::I64(site),
                Operand::Str(format!("`{}` takes {what}, got ", p.name()).into()),
                b,
                Operand::Str("".into()),
            ],
        );
        Ok(Val::known(Av::Bottom))
    }

    /// The AD operators: maps over layouts (see the crate documentation).
    fn ad_prim(&mut self, p: Prim, a: Val, out: &Av) -> R<Val> {
        if *out == Av::Bottom {
            return self.ad_failure(p, a);
        }
        let out_layout = self.layout(out)?;
        if out_layout.is_empty() {
            return Ok(Val::known(out.clone()));
        }
        if p == Prim::ZeroSensR {
            // The lazy zero keeps the reverse value's leaves (see `layout`).
            return Ok(Val {
                av: out.clone(),
                leaves: a.leaves,
            });
        }
        // A one-hot perturbed, and one unperturbed, keep their leaves (the analysis's `tag`
        // and `untag`).
        let lazy = match (p, &a.av) {
            (Prim::Perturb, Av::OneHot(..)) => true,
            (Prim::Unperturb, Av::Tagged(Tag::Perturbation, x)) => matches!(**x, Av::OneHot(..)),
            (Prim::Primal | Prim::Tangent, Av::Bundle(x, y)) => vlad_flow::is_onehot_bundle(x, y),
            _ => false,
        };
        if lazy {
            let image = self.prim_result(p, &a.av)?;
            // The primal or the tangent of two one-hots bundled is one of them.
            let leaves = match &a.av {
                Av::Bundle(x, y) => {
                    let mut parts = self.split(&[x, y], &a.leaves)?;
                    parts.swap_remove(usize::from(p == Prim::Tangent))
                }
                _ => a.leaves,
            };
            return self.coerce(Val { av: image, leaves }, out);
        }
        if p == Prim::IsLazyZero {
            // Unknown (the layout is not empty): the flag of the alternatives, or the boxed
            // value's.
            let flag = match &a.av {
                Av::OrZero(..) => self.or_zero_parts(&a)?.0,
                Av::Dyn(_) => self.rt(Ty::Bool, Rt::IsLazyZero, vec![a.leaves[0].clone()]),
                _ => return self.unsupported("internal: `%lazy-zero?` of a known value"),
            };
            return Ok(Val {
                av: Av::Bool(None),
                leaves: vec![flag],
            });
        }
        let a = self.force(a)?;
        // `plus` and `zero` of boxed closures keep their codes (the runtime maps their
        // environments slot by slot); the other operators would change codes.
        let leaves = match p {
            Prim::Perturb => self.tag_leaves(&a, Tag::Perturbation)?,
            Prim::Sensitize => self.tag_leaves(&a, Tag::Sensitivity)?,
            Prim::StarJ => self.tag_leaves(&a, Tag::Reverse)?,
            Prim::Unperturb | Prim::Unsensitize | Prim::StarJInverse => {
                self.untag_leaves(&a, untag_of(p), p.name())?
            }
            Prim::BuildLength | Prim::IfoldCount => a.leaves,
            Prim::ShallowPrimal => match &a.av {
                Av::Bundle(x, y) => self.split(&[x, y], &a.leaves)?.swap_remove(0),
                Av::Dyn(_) => vec![self.runtime_map(
                    Some(MapKind::ShallowPrimal),
                    Rt::AdShallowPrimal,
                    vec![a.leaves[0].clone()],
                )],
                // A forward array with its tag removed is an array of forward elements: the
                // two arrays zipped into one (soa.rs).
                Av::Array(..) if crate::soa::soa_parts(&a.av).is_some() => vec![self.flat_of(&a)?],
                _ => a.leaves,
            },
            Prim::Primal | Prim::Tangent => self.split_forward(&a, p == Prim::Tangent)?,
            Prim::Zero => self.zero_leaves(&a, false)?,
            Prim::SZero => self.zero_leaves(&a, true)?,
            Prim::Bundle => {
                // (`bundle` computes lazy zeros itself, but keeps two one-hots.)
                let Some((x, y)) = self.two_raw(&a, -1)? else {
                    return self.unsupported("internal: `bundle` of a non-pair");
                };
                self.bundle(&x, &y)?
            }
            Prim::Plus => {
                let Some((x, y)) = self.two_raw(&a, -1)? else {
                    return self.unsupported("internal: `plus` of a non-pair");
                };
                self.plus(&x, &y)?
            }
            Prim::Accumulate => {
                let Some((x, y)) = self.two_raw(&a, -1)? else {
                    return self.unsupported("internal: `%accumulate` of a non-pair");
                };
                self.accumulate(&x, &y)?.leaves
            }
            _ => return self.unsupported(format!("the primitive `{}`", p.name())),
        };
        // An array's leaf is one pointer whatever its element value: the maps above give the
        // element images the analysis computes for this argument, so where the analysis
        // recorded a wider result the array is converted, never read in another layout.
        let leaves = if has_array(out) {
            let image = self.prim_result(p, &a.av)?;
            self.coerce_leaves(&image, &leaves, out)?
        } else {
            leaves
        };
        if leaves.len() != out_layout.len() {
            if std::env::var_os("VLAD_C_DEBUG").is_some() {
                eprintln!("{} of {:?}\n  gives {out:?}", p.name(), a.av);
            }
            return self.unsupported(format!(
                "internal: `{}` gives {} leaves for a layout of {}",
                p.name(),
                leaves.len(),
                out_layout.len()
            ));
        }
        Ok(Val {
            av: out.clone(),
            leaves,
        })
    }

    /// An AD operator the analysis says fails: the runtime's operator on the boxed argument
    /// reports it as the evaluator does.
    fn ad_failure(&mut self, p: Prim, a: Val) -> R<Val> {
        let a = self.force(a)?;
        let (rt, tail): (Rt, Vec<Operand>) = match p {
            Prim::Unperturb | Prim::Unsensitize | Prim::StarJInverse => (
                Rt::AdUntag,
                vec![
                    Operand::I64(untag_of(p) as i64),
                    Operand::Str(p.name().into()),
                ],
            ),
            Prim::Primal | Prim::Tangent => {
                (Rt::AdSplit, vec![Operand::I64((p == Prim::Tangent) as i64)])
            }
            Prim::Plus | Prim::Bundle | Prim::Accumulate => {
                let Some((x, y)) = self.two_raw(&a, -1)? else {
                    return self.unsupported(format!("`{}` applied where it fails", p.name()));
                };
                return match self.shape_failure(p, x, y)? {
                    Some(failed) => Ok(failed),
                    None => self.unsupported(format!("`{}` applied where it fails", p.name())),
                };
            }
            // Pushing a tag fails only past the nesting limit (a closure's transformed
            // code included).
            Prim::Perturb | Prim::Sensitize | Prim::StarJ => {
                let message = vlad_core::transform::TransformError::TooDeep.to_string();
                self.rt_effect(
                    Rt::FailAt,
                    vec![Operand::I64(-1), Operand::Str(message.into())],
                );
                return Ok(Val::known(Av::Bottom));
            }
            _ => return self.unsupported(format!("`{}` applied where it fails", p.name())),
        };
        if matches!(a.av, Av::Closure(..) | Av::Dyn(_)) {
            return self.unsupported(format!("`{}` applied where it fails", p.name()));
        }
        let b = self.boxed_for_display(&a)?;
        let mut args = vec![b];
        args.extend(tail);
        self.rt_effect(rt, args);
        self.fail_internal("an AD operator did not fail as the analysis predicted");
        Ok(Val::known(Av::Bottom))
    }

    /// A runtime AD map of a boxed value, noting that the program needs the map of `kind` for
    /// boxed closures (`None`: the runtime maps closures without one). Every boxed code gets
    /// the map, not only the callees of the value: the runtime's maps recurse into parts,
    /// whose callees differ.
    fn runtime_map(&mut self, kind: Option<MapKind>, rt: Rt, args: Vec<Operand>) -> Operand {
        self.map_kinds.extend(kind);
        self.rt(Ty::Boxed, rt, args)
    }

    /// The leaves of `v` with `tag` pushed (`perturb`, `sensitize`, `*j`): scalars keep their
    /// leaves under the tag; pairs and closures are mapped part by part.
    pub(crate) fn tag_leaves(&mut self, v: &Val, tag: Tag) -> R<Vec<Operand>> {
        // A one-hot perturbed keeps its leaves (the analysis's `tag`).
        if matches!(v.av, Av::OneHot(..)) && tag == Tag::Perturbation {
            return Ok(v.leaves.clone());
        }
        let v = self.force(v.clone())?;
        Ok(match &v.av {
            Av::Dyn(_) => vec![self.runtime_map(
                Some(MapKind::Tag(tag)),
                Rt::AdTag,
                vec![v.leaves[0].clone(), Operand::I64(tag as i64)],
            )],
            Av::Pair(..) | Av::Closure(..) => self.map_parts(&v, |s, x| s.tag_leaves(x, tag))?,
            Av::Array(..) => {
                let to = self.prim_result(tag_prim(tag), &v.av)?;
                self.map_array(&v, &to, |s, x| s.tag_leaves(&x, tag))?
            }
            _ => v.leaves.clone(),
        })
    }

    /// The leaves of `v` with its outermost `tag` removed (`unperturb`, `unsensitize`,
    /// `*j-inverse`).
    pub(crate) fn untag_leaves(&mut self, v: &Val, tag: Tag, name: &str) -> R<Vec<Operand>> {
        if matches!(&v.av, Av::Tagged(t, x) if *t == tag && matches!(**x, Av::OneHot(..))) {
            return Ok(v.leaves.clone());
        }
        let v = self.force(v.clone())?;
        Ok(match &v.av {
            Av::Dyn(_) => vec![self.runtime_map(
                Some(MapKind::Untag(tag)),
                Rt::AdUntag,
                vec![
                    v.leaves[0].clone(),
                    Operand::I64(tag as i64),
                    Operand::Str(name.into()),
                ],
            )],
            Av::Pair(..) | Av::Closure(..) => {
                self.map_parts(&v, |s, x| s.untag_leaves(x, tag, name))?
            }
            Av::Array(..) => {
                let to = self.prim_result(untag_prim(tag), &v.av)?;
                self.map_array(&v, &to, |s, x| s.untag_leaves(&x, tag, name))?
            }
            _ => v.leaves.clone(),
        })
    }

    /// The leaves of `(zero v)` (or of the zero sensitivity): reals become known zeros, and
    /// booleans stay, so only the leaves of unknown booleans remain.
    pub(crate) fn zero_leaves(&mut self, v: &Val, sensitivity: bool) -> R<Vec<Operand>> {
        let v = self.force(v.clone())?;
        Ok(match &v.av {
            // `zero` keeps a boxed closure's code: the runtime maps it slot by slot.
            Av::Dyn(_) => vec![self.runtime_map(
                sensitivity.then_some(MapKind::SZero),
                Rt::AdZero,
                vec![v.leaves[0].clone(), Operand::I64(sensitivity as i64)],
            )],
            Av::Bool(None) => v.leaves.clone(),
            Av::Pair(..) | Av::Bundle(..) | Av::Closure(..) => {
                self.map_parts(&v, |s, x| s.zero_leaves(x, sensitivity))?
            }
            Av::Tagged(_, x) => {
                let ps = self.parts(&v, &[x])?;
                self.zero_leaves(&ps[0], sensitivity)?
            }
            Av::Array(..) => {
                let p = if sensitivity { Prim::SZero } else { Prim::Zero };
                let to = self.prim_result(p, &v.av)?;
                self.map_array(&v, &to, |s, x| s.zero_leaves(&x, sensitivity))?
            }
            _ => Vec::new(),
        })
    }

    /// The leaves of `primal` (or `tangent`) of a forward value.
    pub(crate) fn split_forward(&mut self, v: &Val, tangent: bool) -> R<Vec<Operand>> {
        // Lazy zeros computed, but two one-hots bundled kept (the analysis's `split`).
        let v = &match &v.av {
            Av::Bundle(p, t) if vlad_flow::is_onehot_bundle(p, t) => v.clone(),
            _ => self.force(v.clone())?,
        };
        Ok(match &v.av {
            Av::Dyn(_) => vec![self.runtime_map(
                Some(MapKind::Split(tangent)),
                Rt::AdSplit,
                vec![v.leaves[0].clone(), Operand::I64(tangent as i64)],
            )],
            Av::Bundle(p, t) => {
                let mut parts = self.split(&[p, t], &v.leaves)?;
                parts.swap_remove(tangent as usize)
            }
            Av::Pair(..) | Av::Closure(..) => {
                self.map_parts(v, |s, x| s.split_forward(x, tangent))?
            }
            // A forward array kept as two: one of them.
            Av::Array(..) if super::soa::soa_parts(&v.av).is_some() => {
                let (p, q) = self.soa_vals(v)?.expect("checked");
                if tangent {
                    q.leaves
                } else {
                    p.leaves
                }
            }
            Av::Array(..) => {
                let p = if tangent { Prim::Tangent } else { Prim::Primal };
                let to = self.prim_result(p, &v.av)?;
                self.map_array(v, &to, |s, x| s.split_forward(&x, tangent))?
            }
            _ if self.layout(&v.av)?.is_empty() => Vec::new(),
            _ => return self.unsupported("`primal` or `tangent` of an unexpected value"),
        })
    }

    /// The leaves of `(bundle p t)`.
    pub(crate) fn bundle(&mut self, p: &Val, t: &Val) -> R<Vec<Operand>> {
        // Two one-hots stay as they are (the analysis's `bundle`).
        if vlad_flow::is_onehot_bundle(&p.av, &t.av) {
            let mut out = p.leaves.clone();
            out.extend(t.leaves.iter().cloned());
            return Ok(out);
        }
        // Parts of a structure (elements of flat arrays too) may be lazy zeros.
        let (p, t) = (&self.force(p.clone())?, &self.force(t.clone())?);
        Ok(match (&p.av, &t.av) {
            (Av::Dyn(_), _) | (_, Av::Dyn(_)) => {
                let (x, y) = (self.boxed_val(p)?, self.boxed_val(t)?);
                vec![self.runtime_map(Some(MapKind::Bundle), Rt::AdBundle, vec![x, y])]
            }
            (Av::Pair(..), Av::Pair(..)) | (Av::Closure(..), Av::Closure(..)) => {
                self.zip_parts(p, t, true, |s, x, y| s.bundle(x, y))?
            }
            (Av::Array(..), Av::Array(..)) => {
                let to = self.prim_result(Prim::Bundle, &Av::pair(p.av.clone(), t.av.clone()))?;
                match super::soa::soa_parts(&to) {
                    // A forward array kept as two: the two arrays, their lengths checked
                    // (unless an element's lazy zero has to be computed first, as `bundle`
                    // of two elements does: element by element then).
                    Some((tp, tq))
                        if p.av.join(&tp, &mut Default::default()) == tp
                            && t.av.join(&tq, &mut Default::default()) == tq =>
                    {
                        let n = self.array_len(p)?;
                        let m = self.array_len(t)?;
                        self.lengths_agree("bundle", &n, &m);
                        let mut out = self.coerce(p.clone(), &tp)?.leaves;
                        out.extend(self.coerce(t.clone(), &tq)?.leaves);
                        out
                    }
                    _ => self.zip_array("bundle", p, t, &to, |s, x, y| s.bundle(&x, &y))?,
                }
            }
            (Av::Array(..), _) | (_, Av::Array(..)) => {
                if std::env::var_os("VLAD_C_DEBUG").is_some() {
                    eprintln!("bundle of {:?}\n  and {:?}", p.av, t.av);
                }
                return self.unsupported("`bundle` of an array and another value");
            }
            // Scalars: the primal's leaves, then the perturbation's. Where a part of either is
            // boxed, the analysis could not tell whether their shapes agree: the runtime's
            // `bundle` of the boxed values checks it (the evaluator's error), its result unused.
            _ => {
                // Booleans bundle only with themselves (the evaluator's shape error otherwise).
                if let Av::Tagged(Tag::Perturbation, inner) = &t.av {
                    let inner = Val {
                        av: (**inner).clone(),
                        leaves: t.leaves.clone(),
                    };
                    let pairs = self.boolean_pairs(p, &inner);
                    self.fail_unless_equal("bundle", pairs, p, t)?;
                }
                if has_boxed_part(&p.av) || has_boxed_part(&t.av) {
                    let (x, y) = (self.boxed_val(p)?, self.boxed_val(t)?);
                    self.map_kinds.insert(MapKind::Bundle);
                    self.rt_effect(Rt::AdBundle, vec![x, y]);
                }
                let mut out = p.leaves.clone();
                out.extend(t.leaves.iter().cloned());
                out
            }
        })
    }

    /// The corresponding booleans of two scalar values of one structure (booleans, bundles and
    /// tagged values of them), as operands.
    fn boolean_pairs(&self, a: &Val, b: &Val) -> Vec<(Operand, Operand)> {
        fn go(s: &Lowerer, a: &Val, b: &Val, out: &mut Vec<(Operand, Operand)>) {
            let operand = |v: &Val| match &v.av {
                Av::Bool(Some(x)) => Some(Operand::Bool(*x)),
                Av::Bool(None) => v.leaves.first().cloned(),
                _ => None,
            };
            match (&a.av, &b.av) {
                (Av::Bool(_), Av::Bool(_)) => {
                    if let (Some(x), Some(y)) = (operand(a), operand(b)) {
                        out.push((x, y));
                    }
                }
                (Av::Bundle(p1, t1), Av::Bundle(p2, t2)) => {
                    let (Ok(xs), Ok(ys)) =
                        (s.split(&[p1, t1], &a.leaves), s.split(&[p2, t2], &b.leaves))
                    else {
                        return;
                    };
                    for ((x, xl), (y, yl)) in [(p1, &xs[0]), (t1, &xs[1])]
                        .into_iter()
                        .zip([(p2, &ys[0]), (t2, &ys[1])])
                    {
                        let xv = Val {
                            av: (**x).clone(),
                            leaves: xl.clone(),
                        };
                        let yv = Val {
                            av: (**y).clone(),
                            leaves: yl.clone(),
                        };
                        go(s, &xv, &yv, out);
                    }
                }
                (Av::Tagged(t, x), Av::Tagged(u, y)) if t == u => {
                    let xv = Val {
                        av: (**x).clone(),
                        leaves: a.leaves.clone(),
                    };
                    let yv = Val {
                        av: (**y).clone(),
                        leaves: b.leaves.clone(),
                    };
                    go(s, &xv, &yv, out);
                }
                _ => {}
            }
        }
        let mut out = Vec::new();
        go(self, a, b, &mut out);
        out
    }

    /// Fails with the evaluator's shape error of `op` on `a` and `b` unless each pair of
    /// booleans is equal (a check at run time where one is not known).
    fn fail_unless_equal(
        &mut self,
        op: &str,
        pairs: Vec<(Operand, Operand)>,
        a: &Val,
        b: &Val,
    ) -> R<()> {
        let mut cond: Option<Operand> = None;
        for (x, y) in pairs {
            let same = match (&x, &y) {
                (Operand::Bool(p), Operand::Bool(q)) => Operand::Bool(p == q),
                _ => self.let1(Ty::Bool, Op::Binary(BinOp::BEq, x, y)),
            };
            cond = Some(match cond {
                None => same,
                Some(c) => self.let1(Ty::Bool, Op::Binary(BinOp::And, c, same)),
            });
        }
        let Some(cond) = cond else { return Ok(()) };
        if cond == Operand::Bool(true) {
            return Ok(());
        }
        let ((), fail) = self.block(|s| {
            let ba = s.boxed_for_display(a)?;
            let bb = s.boxed_for_display(b)?;
            s.rt_effect(Rt::ShapeFail, vec![Operand::Str(op.into()), ba, bb]);
            Ok(())
        })?;
        self.b.push(Stmt::If {
            cond,
            then: Vec::new(),
            els: fail,
        });
        Ok(())
    }

    /// `plus`, `bundle` or `%accumulate` of two values of shapes it does not combine: the
    /// evaluator's error, or `None` where the failure is inside the environments of closures of
    /// one code, or only known at run time (a boxed operand).
    fn shape_failure(&mut self, p: Prim, x: Val, y: Val) -> R<Option<Val>> {
        let (x, y) = (self.force(x)?, self.force(y)?);
        let same_code = matches!((&x.av, &y.av),
            (Av::Closure(c, _), Av::Closure(d, _)) if c == d);
        if same_code || [&x.av, &y.av].iter().any(|v| matches!(v, Av::Dyn(_))) {
            return Ok(None);
        }
        let bx = self.boxed_for_display(&x)?;
        let by = self.boxed_for_display(&y)?;
        if [&x.av, &y.av].iter().any(|v| matches!(v, Av::Closure(..))) {
            // A closure against a value of another shape (another code, a non-procedure): the
            // evaluator's shape error, whose description of a procedure does not show its
            // environment.
            self.rt_effect(Rt::ShapeFail, vec![Operand::Str(p.name().into()), bx, by]);
            return Ok(Some(Val::known(Av::Bottom)));
        }
        let rt = if p != Prim::Bundle {
            Rt::AdPlus
        } else {
            Rt::AdBundle
        };
        self.rt_effect(rt, vec![bx, by]);
        self.fail_internal("an AD operator did not fail as the analysis predicted");
        Ok(Some(Val::known(Av::Bottom)))
    }

    /// The leaves of `(plus a b)`.
    pub(crate) fn plus(&mut self, a: &Val, b: &Val) -> R<Vec<Operand>> {
        if let Av::Zero(_) = a.av {
            return Ok(b.leaves.clone());
        }
        if let Av::Zero(_) = b.av {
            return Ok(a.leaves.clone());
        }
        // A lazy zero or a value: the other operand itself, or the sum (in the layout of what
        // the analysis gives for the two together).
        if let Av::OrZero(..) = a.av {
            return self.plus_or_zero(a, b, false);
        }
        if let Av::OrZero(..) = b.av {
            return self.plus_or_zero(b, a, true);
        }
        // A one-hot and a dense array sensitivity: the two; a sum and a dense array: the dense
        // parts added, the one-hot kept (the analysis's `Av::Sum`, where the two are of one
        // array; boxed below where they are not).
        if let (Av::OneHot(..) | Av::Sum(..), Av::Array(..))
        | (Av::Array(..), Av::OneHot(..) | Av::Sum(..)) = (&a.av, &b.av)
        {
            let image = self.prim_result(Prim::Plus, &Av::pair(a.av.clone(), b.av.clone()))?;
            if matches!(image, Av::Sum(..)) {
                return if matches!(a.av, Av::Sum(..)) || matches!(b.av, Av::Sum(..)) {
                    self.plus_sum_dense(a, b, &image)
                } else {
                    self.make_sum(a, b, &image)
                };
            }
        }
        Ok(match (&a.av, &b.av) {
            // A one-hot or a sum and another array sensitivity: boxed, a lazy sum (the
            // analysis's).
            (Av::Dyn(_), _)
            | (_, Av::Dyn(_))
            | (Av::OneHot(..) | Av::Sum(..), _)
            | (_, Av::OneHot(..) | Av::Sum(..)) => {
                let (x, y) = (self.boxed_val(a)?, self.boxed_val(b)?);
                vec![self.rt(Ty::Boxed, Rt::AdPlus, vec![x, y])]
            }
            (Av::Real(Some(_)), Av::Real(Some(_))) => Vec::new(),
            (Av::Real(_), Av::Real(_)) => {
                let x = match &a.av {
                    Av::Real(Some(x)) => Operand::F64(x.get()),
                    _ => a.leaves[0].clone(),
                };
                let y = match &b.av {
                    Av::Real(Some(y)) => Operand::F64(y.get()),
                    _ => b.leaves[0].clone(),
                };
                vec![self.let1(Ty::F64, Op::Binary(BinOp::FAdd, x, y))]
            }
            (Av::Pair(..), Av::Pair(..))
            | (Av::Bundle(..), Av::Bundle(..))
            | (Av::Tagged(..), Av::Tagged(..))
            | (Av::Closure(..), Av::Closure(..)) => {
                self.zip_parts(a, b, false, |s, x, y| s.plus(x, y))?
            }
            (Av::Array(..), Av::Array(..)) => {
                let to = self.prim_result(Prim::Plus, &Av::pair(a.av.clone(), b.av.clone()))?;
                self.zip_array("plus", a, b, &to, |s, x, y| s.plus(&x, &y))?
            }
            // Booleans add only to themselves (the evaluator's shape error otherwise).
            (Av::Bool(x), Av::Bool(y)) if x.is_none() || y.is_none() => {
                let pairs = self.boolean_pairs(a, b);
                self.fail_unless_equal("plus", pairs, a, b)?;
                if x.is_none() {
                    a.leaves.clone()
                } else {
                    b.leaves.clone()
                }
            }
            _ if self.layout(&a.av)?.is_empty() && self.layout(&b.av)?.is_empty() => Vec::new(),
            _ => return self.unsupported("`plus` of unexpected values"),
        })
    }
}

impl Lowerer<'_, '_> {
    /// `(plus z y)` (`(plus y z)` if `swapped`) where `z` may be a lazy zero: `y` if it is,
    /// else the sum of `y` and the other alternative.
    fn plus_or_zero(&mut self, z: &Val, y: &Val, swapped: bool) -> R<Vec<Operand>> {
        let (flag, _, x) = self.or_zero_parts(z)?;
        let image = |s: &mut Self, u: &Av, w: &Av| -> R<Av> {
            let (a, b) = if swapped { (w, u) } else { (u, w) };
            s.prim_result(Prim::Plus, &Av::pair(a.clone(), b.clone()))
        };
        let out = image(self, &z.av, &y.av)?;
        let v = self.branch(Cond::Test(flag), &out, |s, then| {
            if then {
                return Ok(y.clone());
            }
            let av = image(s, &x.av, &y.av)?;
            if av == Av::Bottom {
                // The value that is not a lazy zero does not add to the other (the analysis
                // joined shapes that never meet at run time, or the program fails here): the
                // evaluator's error.
                let (a, b) = if swapped { (y, &x) } else { (&x, y) };
                if let Some(failed) = s.shape_failure(Prim::Plus, a.clone(), b.clone())? {
                    return Ok(failed);
                }
            }
            let leaves = if swapped {
                s.plus(y, &x)?
            } else {
                s.plus(&x, y)?
            };
            Ok(Val { av, leaves })
        })?;
        Ok(v.leaves)
    }
}

/// The primitive that pushes `tag` (`Tag::Forward` is `bundle`'s, never a map's).
fn tag_prim(tag: Tag) -> Prim {
    match tag {
        Tag::Perturbation => Prim::Perturb,
        Tag::Sensitivity => Prim::Sensitize,
        _ => Prim::StarJ,
    }
}

/// The primitive that removes `tag`.
fn untag_prim(tag: Tag) -> Prim {
    match tag {
        Tag::Perturbation => Prim::Unperturb,
        Tag::Sensitivity => Prim::Unsensitize,
        _ => Prim::StarJInverse,
    }
}

/// The tag an untagging operator removes.
fn untag_of(p: Prim) -> Tag {
    match p {
        Prim::Unperturb => Tag::Perturbation,
        Prim::Unsensitize => Tag::Sensitivity,
        _ => Tag::Reverse,
    }
}
