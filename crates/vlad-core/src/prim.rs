//! The primitive procedures of VLAD (DESIGN.md, "The language"). Primitive names are ordinary
//! variables bound in the top-level basis; the expander resolves an unshadowed name to a
//! [`crate::Expr::Prim`] node.

macro_rules! prims {
    ($($variant:ident => $name:literal,)*) => {
        /// A primitive procedure.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Prim { $($variant,)* }

        impl Prim {
            /// Every primitive, in declaration order.
            pub const ALL: &'static [Prim] = &[$(Prim::$variant,)*];

            /// The name a program uses for this primitive.
            pub fn name(self) -> &'static str {
                match self { $(Prim::$variant => $name,)* }
            }
        }
    };
}

prims! {
    Add => "+",
    Sub => "-",
    Mul => "*",
    Div => "/",
    Sqrt => "sqrt",
    Exp => "exp",
    Log => "log",
    Sin => "sin",
    Cos => "cos",
    Atan => "atan",
    Eq => "=",
    Lt => "<",
    Gt => ">",
    Le => "<=",
    Ge => ">=",
    IsZero => "zero?",
    IsPositive => "positive?",
    IsNegative => "negative?",
    IsNull => "null?",
    IsBoolean => "boolean?",
    IsReal => "real?",
    IsPair => "pair?",
    IsProcedure => "procedure?",
    IsPerturbation => "perturbation?",
    IsForward => "forward?",
    IsSensitivity => "sensitivity?",
    IsReverse => "reverse?",
    IfProcedure => "if-procedure",
    ReadReal => "read-real",
    Real => "real",
    WriteReal => "write-real",
    Write => "write",
    Zero => "zero",
    Perturb => "perturb",
    Unperturb => "unperturb",
    Primal => "primal",
    Tangent => "tangent",
    Bundle => "bundle",
    Sensitize => "sensitize",
    Unsensitize => "unsensitize",
    Plus => "plus",
    StarJ => "*j",
    StarJInverse => "*j-inverse",
    // `(checkpoint f x)` is `(f x)`; reverse mode recomputes it in the backward sweep instead
    // of keeping its tape (docs/ad.md, "Checkpointing").
    Checkpoint => "checkpoint",
    // Arrays (paper 002).
    Build => "build",
    Ifold => "ifold",
    Get => "get",
    ArrayLength => "array-length",
    // Internal primitives, used by the reverse transform and the prelude; a program cannot name
    // them (`from_name` skips them).
    ZeroSensR => "%zero-sensitivity",
    SZero => "%sensitivity-zero",
    ShallowPrimal => "%shallow-primal",
    // Used by the prelude's definitions of `build` and `ifold` and by reverse-mode `get`.
    BuildLength => "%build-length",
    IfoldCount => "%ifold-count",
    ListToArrayRev => "%list->array-rev",
    ArrayToListRev => "%array->list-rev",
    OneHotSens => "%onehot-sensitivity",
    // The loop of reverse-mode `ifold`: an `ifold` whose step also gives a value to keep,
    // collected in an array (the tape of the step's backpropagators).
    IfoldTape => "%ifold-tape",
    // The value itself, a lazy array sensitivity (or zero) computed: the sweeps of the reverse
    // `build` and `%ifold-tape` read the sensitivity of their array an element at a time.
    Dense => "%dense",
    // `plus`, for the accumulators of the sweeps of the reverse `build` and `ifold`: compiled
    // code adds into the accumulator's arrays in place (crates/vlad-lower/src/accumulate.rs).
    Accumulate => "%accumulate",
    // Whether a sensitivity is a lazy zero (`%zero-sensitivity`, the evaluator's
    // `Value::Zero`): the sweeps of the reverse `build` and `ifold` skip their loop on one.
    IsLazyZero => "%lazy-zero?",
    // `zero?` of a tangent, whose forward version asks it of the primal and of the tangent:
    // whether a tangent is exactly zero at every level of nesting. The forward derivative
    // rules skip the term of a zero tangent (docs/decisions.md, "A zero tangent contributes
    // nothing").
    ZeroTangent => "%zero-tangent?",
}

impl Prim {
    /// Looks a primitive up by its name.
    pub fn from_name(name: &str) -> Option<Prim> {
        Prim::ALL
            .iter()
            .copied()
            .find(|p| !p.is_internal() && p.name() == name)
    }

    /// Looks a primitive up by name, internal ones included (for the built-in prelude).
    pub fn from_name_internal(name: &str) -> Option<Prim> {
        Prim::ALL.iter().copied().find(|p| p.name() == name)
    }

    /// The head of the error of a call of `if-procedure` or `checkpoint` whose argument is not
    /// of the shape it takes, up to the description of the argument (the evaluator, the
    /// executor of the specialised program and compiled code report the same).
    pub fn malformed_call_head(self) -> String {
        let takes = match self {
            Prim::IfProcedure => "a condition and two procedures",
            _ => "a procedure and its argument",
        };
        format!("`{}` takes {takes}, got ", self.name())
    }

    /// Internal primitives are not visible to programs.
    pub fn is_internal(self) -> bool {
        matches!(
            self,
            Prim::ZeroSensR
                | Prim::SZero
                | Prim::ShallowPrimal
                | Prim::BuildLength
                | Prim::IfoldCount
                | Prim::ListToArrayRev
                | Prim::ArrayToListRev
                | Prim::OneHotSens
                | Prim::IfoldTape
                | Prim::Dense
                | Prim::Accumulate
                | Prim::IsLazyZero
                | Prim::ZeroTangent
        )
    }

    /// Unary real functions R -> R.
    pub fn is_unary_real(self) -> bool {
        matches!(
            self,
            Prim::Sqrt | Prim::Exp | Prim::Log | Prim::Sin | Prim::Cos
        )
    }

    /// Binary real functions R x R -> R.
    pub fn is_binary_real(self) -> bool {
        matches!(
            self,
            Prim::Add | Prim::Sub | Prim::Mul | Prim::Div | Prim::Atan
        )
    }

    /// Binary comparisons of reals.
    pub fn is_comparison(self) -> bool {
        matches!(self, Prim::Eq | Prim::Lt | Prim::Gt | Prim::Le | Prim::Ge)
    }

    /// Unary predicates on reals.
    pub fn is_real_predicate(self) -> bool {
        matches!(self, Prim::IsZero | Prim::IsPositive | Prim::IsNegative)
    }

    /// Unary type predicates (any value).
    pub fn is_type_predicate(self) -> bool {
        matches!(
            self,
            Prim::IsNull
                | Prim::IsBoolean
                | Prim::IsReal
                | Prim::IsPair
                | Prim::IsProcedure
                | Prim::IsPerturbation
                | Prim::IsForward
                | Prim::IsSensitivity
                | Prim::IsReverse
        )
    }
    /// The base (untagged) real function of a unary or binary arithmetic primitive (`y` is
    /// ignored for unary ones). The one definition of VLAD's arithmetic: the evaluator computes
    /// with it and the flow analysis folds constants with it, so folding never changes a result.
    pub fn arith(self, x: f64, y: f64) -> f64 {
        match self {
            Prim::Add => x + y,
            Prim::Sub => x - y,
            Prim::Mul => x * y,
            Prim::Div => x / y,
            Prim::Atan => x.atan2(y),
            Prim::Sqrt => x.sqrt(),
            Prim::Exp => x.exp(),
            Prim::Log => x.ln(),
            Prim::Sin => x.sin(),
            Prim::Cos => x.cos(),
            _ => unreachable!("not arithmetic"),
        }
    }

    /// A comparison of reals (as `arith`, shared by the evaluator and the analysis).
    pub fn compare(self, x: f64, y: f64) -> bool {
        match self {
            Prim::Eq => x == y,
            Prim::Lt => x < y,
            Prim::Gt => x > y,
            Prim::Le => x <= y,
            Prim::Ge => x >= y,
            _ => unreachable!("not a comparison"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn there_are_48_primitives_with_unique_names() {
        let visible: Vec<Prim> = Prim::ALL
            .iter()
            .copied()
            .filter(|p| !p.is_internal())
            .collect();
        assert_eq!(visible.len(), 48);
        for p in visible {
            assert_eq!(Prim::from_name(p.name()), Some(p));
        }
        for p in Prim::ALL.iter().filter(|p| p.is_internal()) {
            assert_eq!(Prim::from_name(p.name()), None);
        }
    }
}
