//! The runtime's functions, as the IR calls them: one typed entry each, with what it may do.
//! The verifier checks every call against `Rt::signature`; the passes read `Rt::effects` (a
//! call that allocates needs the arena marks around it; one that never returns ends a path).
//! The C backend names each (`runtime.c` defines them).

use crate::ir::Ty;

/// A parameter's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum P {
    F64,
    Bool,
    I64,
    /// Any pointer: a boxed value or a flat array (or `Null`).
    Ptr,
    Str,
    Mark,
}

/// A result's type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ret {
    None,
    F64,
    Bool,
    I64,
    Boxed,
    /// A pointer whose IR type the caller states (its result variable's): a boxed value or a
    /// flat array, as the arguments say.
    Ptr,
}

/// What a runtime function may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Effects {
    /// Allocates in the arena.
    pub allocates: bool,
    /// May fail (report an error and exit) instead of returning.
    pub fails: bool,
    /// Never returns.
    pub noreturn: bool,
    /// Reads input or writes output.
    pub io: bool,
}

const PURE: Effects = Effects {
    allocates: false,
    fails: false,
    noreturn: false,
    io: false,
};
const ALLOC: Effects = Effects {
    allocates: true,
    ..PURE
};
const CHECK: Effects = Effects {
    fails: true,
    ..PURE
};
const ALLOC_CHECK: Effects = Effects {
    allocates: true,
    fails: true,
    ..PURE
};
const FAIL: Effects = Effects {
    fails: true,
    noreturn: true,
    ..PURE
};
const IO: Effects = Effects { io: true, ..PURE };

macro_rules! runtime {
    ($($(#[$doc:meta])* $variant:ident => $c:literal, [$($p:ident),*], $ret:ident, $eff:expr;)*) => {
        /// A function of the runtime.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Rt { $($(#[$doc])* $variant,)* }

        impl Rt {
            pub const ALL: &'static [Rt] = &[$(Rt::$variant,)*];

            /// Its name in runtime.c.
            pub fn c_name(self) -> &'static str {
                match self { $(Rt::$variant => $c,)* }
            }

            /// Its parameters and result.
            pub fn signature(self) -> (&'static [P], Ret) {
                match self { $(Rt::$variant => (&[$(P::$p),*], Ret::$ret),)* }
            }

            pub fn effects(self) -> Effects {
                match self { $(Rt::$variant => $eff,)* }
            }
        }
    };
}

runtime! {
    // Boxing.
    /// A boxed real.
    BoxReal => "vl_real", [F64], Boxed, ALLOC;
    BoxBool => "vl_bool", [Bool], Boxed, PURE;
    /// A boxed primitive, by index.
    BoxPrim => "vl_prim", [I64], Boxed, ALLOC;
    /// A boxed pair: its tag bits and its parts.
    BoxPair => "vl_pair", [I64, Ptr, Ptr], Boxed, ALLOC;
    BoxBundle => "vl_bundle", [Ptr, Ptr], Boxed, ALLOC;
    /// A boxed tagged scalar: the tag's number and the value.
    BoxTagged => "vl_tagged", [I64, Ptr], Boxed, ALLOC;
    /// A boxed closure of a code with this many slots (filled by `SetField`).
    BoxClosure => "vl_closure", [I64, I64], Boxed, ALLOC;
    /// A flat array boxed by reference: its tag bits and its element layout's boxer.
    BoxFlatRef => "vl_flatref", [Ptr, I64, I64], Boxed, ALLOC;
    /// A boxed value flagged as a lazy zero (`plus` returns the other operand).
    AsZero => "vl_as_zero", [Ptr], Boxed, ALLOC;
    Nil => "vl_nil_value", [], Boxed, PURE;
    // Reading boxed values.
    Truthy => "vl_truthy", [Ptr], Bool, PURE;
    DenseArray => "vl_dense_array", [I64, Ptr], Boxed, ALLOC_CHECK;
    AccOwned => "vl_acc_owned", [Ptr], Bool, PURE;
    /// Whether a boxed value is a lazy zero (`%lazy-zero?`).
    IsLazyZero => "vl_is_lazy_zero", [Ptr], Bool, PURE;
    AccMark => "vl_acc_mark", [Ptr], Ptr, PURE;
    /// The array, no longer an accumulator's own (`passes::overwrite`'s result).
    AccClear => "vl_acc_clear", [Ptr], Ptr, PURE;
    /// The real in a boxed value, checked (the evaluator's error naming the primitive).
    ToReal => "vl_to_real", [Ptr, I64, Str], F64, CHECK;
    /// The car of a boxed pair with these tags, checked; `Cdr` of a checked pair.
    Car => "vl_car", [Ptr, I64, I64], Boxed, CHECK;
    Cdr => "vl_cdr", [Ptr], Boxed, PURE;
    EqualData => "vl_equal_data", [Ptr, Ptr], Bool, PURE;
    /// A boxed value is the real `x` (a constant pattern).
    IsRealEq => "vl_real_is", [Ptr, F64], Bool, PURE;
    IsBoolEq => "vl_bool_is", [Ptr, Bool], Bool, PURE;
    /// A boxed value is an untagged pair (`pair?`).
    IsPlainPair => "vl_is_plain_pair", [Ptr], Bool, PURE;
    // Arrays.
    /// The count of `build` (`op`, `what`) checked: a natural number.
    CheckCount => "vl_check_count", [I64, Str, Str, F64], None, CHECK;
    CountOk => "vl_count_ok", [F64], Bool, PURE;
    CountFail => "vl_count_fail", [I64, Str, Str, F64, Ptr], None, FAIL;
    /// The count of `build` or `ifold` (`op`, `what`) that is a boxed value: its innermost
    /// primal, checked as `CheckCount` checks a real (the evaluator's errors, the value whole).
    BoxedCount => "vl_boxed_count", [I64, Str, Str, Ptr], F64, CHECK;
    /// An index checked against a length.
    Index => "vl_index", [I64, F64, I64], I64, CHECK;
    /// An integer index checked against a length (the same errors as `Index`).
    IndexI64 => "vl_index_i", [I64, I64, I64], I64, CHECK;
    /// A boxed index checked to be a real.
    IndexReal => "vl_index_real", [I64, Ptr], F64, CHECK;
    BoxedGet => "vl_boxed_get", [I64, Ptr, F64], Boxed, ALLOC_CHECK;
    BoxedGetV => "vl_boxed_get_v", [I64, Ptr, Ptr], Boxed, ALLOC_CHECK;
    BoxedLength => "vl_boxed_length", [I64, Ptr], F64, CHECK;
    /// An exported entry's argument (a boxed array of reals, or of such arrays, this deep) as
    /// a flat array, checked; the message names the entry point.
    AsFlat => "vl_as_flat", [Ptr, I64, Str], Ptr, ALLOC_CHECK;
    /// An exported entry's argument checked to be a real.
    ArgReal => "vl_arg_real", [Ptr, Str], F64, CHECK;
    NotArray => "vl_not_array", [I64, Str, Ptr], None, FAIL;
    LengthFail => "vl_length_fail", [Str, I64, I64], None, FAIL;
    /// `LengthFail` where a sweep adds two sensitivities of one value (`%accumulate`):
    /// `passes::unread` drops it with the sensitivity if no one reads that.
    AccLengthFail => "vl_length_fail", [Str, I64, I64], None, FAIL;
    /// The lazy one-hot sensitivity of a reverse `get`.
    OneHot => "vl_onehot", [Ptr, I64, I64, Ptr, I64, Ptr], Boxed, ALLOC;
    /// The list `build`'s loop accumulated as an array: boxed (0) or flat of boxed elements (1).
    ListToArrayRev => "vl_list_to_array_rev", [Ptr, I64], Ptr, ALLOC;
    ArrayToListRev => "vl_array_to_list_rev", [I64, Ptr], Boxed, ALLOC_CHECK;
    // The AD operators on boxed values.
    AdTag => "vl_ad_tag", [Ptr, I64], Boxed, ALLOC_CHECK;
    AdUntag => "vl_ad_untag", [Ptr, I64, Str], Boxed, ALLOC_CHECK;
    AdSplit => "vl_ad_split", [Ptr, I64], Boxed, ALLOC_CHECK;
    AdZero => "vl_ad_zero", [Ptr, I64], Boxed, ALLOC_CHECK;
    AdShallowPrimal => "vl_ad_shallow_primal", [Ptr], Boxed, ALLOC_CHECK;
    AdBundle => "vl_ad_bundle", [Ptr, Ptr], Boxed, ALLOC_CHECK;
    AdPlus => "vl_ad_plus", [Ptr, Ptr], Boxed, ALLOC_CHECK;
    ZeroSens => "vl_zero_sens", [Ptr], Boxed, ALLOC_CHECK;
    // Input and output.
    ReadReal => "vl_read_real", [I64], F64, Effects { fails: true, ..IO };
    WriteReal => "vl_write_real", [F64], F64, IO;
    WriteValue => "vl_write_value", [Ptr], Boxed, IO;
    PrintLine => "vl_print_line", [Ptr], None, IO;
    /// A line known at compile time.
    PutLine => "vl_put_line", [Str], None, IO;
    // Errors.
    FailInternal => "vl_fail_internal", [Str], None, FAIL;
    /// An AD map (by kind) met a boxed closure of a code it was not compiled for.
    FailNoMap => "vl_fail_no_map", [I64, Ptr], None, FAIL;
    FailValue => "vl_fail_value", [I64, Str, Ptr, Str], None, FAIL;
    FailMismatch => "vl_fail_mismatch", [I64, Ptr, Ptr], None, FAIL;
    FailTwo => "vl_fail_two", [I64, Str, Ptr, Ptr], None, FAIL;
    FailAt => "vl_fail_at", [I64, Str], None, FAIL;
    ShapeFail => "vl_shape_fail", [Str, Ptr, Ptr], None, FAIL;
    ExitDiagnostic => "vl_exit_diagnostic", [Str], None, FAIL;
}

impl Ret {
    /// Whether a variable of type `ty` can hold this result.
    pub fn accepts(&self, ty: &Ty) -> bool {
        match self {
            Ret::None => false,
            Ret::F64 => *ty == Ty::F64,
            Ret::Bool => *ty == Ty::Bool,
            Ret::I64 => *ty == Ty::I64,
            Ret::Boxed => *ty == Ty::Boxed,
            Ret::Ptr => ty.is_pointer(),
        }
    }
}

impl P {
    /// Whether an operand of type `ty` fits.
    pub fn accepts(self, ty: &Ty) -> bool {
        match self {
            P::F64 => *ty == Ty::F64,
            P::Bool => *ty == Ty::Bool,
            P::I64 => *ty == Ty::I64,
            P::Ptr => ty.is_pointer(),
            P::Str => *ty == Ty::Str,
            P::Mark => *ty == Ty::Mark,
        }
    }
}
