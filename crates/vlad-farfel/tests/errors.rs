//! What is outside the subset, ill-typed or unbalanced is an error at its line and column,
//! never a panic.

mod common;
use common::error;

/// `(source, line, column, part of the message)`.
const CASES: &[(&str, usize, usize, &str)] = &[
    // Unsupported statements and constructs.
    ("      PROGRAM P\n      COMMON /B/ X\n      END\n", 2, 7, "COMMON is not supported"),
    ("      PROGRAM P\n      CHARACTER*8 S\n      END\n", 2, 7, "CHARACTER is not supported"),
    ("      PROGRAM P\n   10 FORMAT (F8.3)\n      END\n", 2, 7, "FORMAT is not supported"),
    ("      PROGRAM P\n      PRINT 10, X\n      END\n", 2, 7, "only list-directed PRINT"),
    ("      PROGRAM P\n      PRINT *, 'A'\n      END\n", 2, 16, "character constants"),
    ("      PROGRAM P\n      IF (X) 10, 20, 30\n   10 END\n", 2, 7, "arithmetic IF"),
    ("      PROGRAM P\n      GOTO (10, 20), I\n   10 END\n", 2, 7, "only GOTO label"),
    ("      PROGRAM P\n      DO WHILE (X .LT. 1)\n      END DO\n      END\n", 2, 7, "DO WHILE"),
    ("      PROGRAM P\n      F(X) = X*X\n      END\n", 2, 7, "statement functions"),
    ("      SUBROUTINE S\n      STOP\n      END\n      PROGRAM P\n      END\n", 2, 7, "STOP is only"),
    // Types.
    ("      PROGRAM P\n      X = 1.5\n      IF (X) THEN\n      END IF\n      END\n", 3, 11, "LOGICAL condition"),
    ("      PROGRAM P\n      LOGICAL L\n      L = 1.0\n      END\n", 3, 11, "L is LOGICAL"),
    ("      PROGRAM P\n      Y = SQRT(4)\n      END\n", 2, 16, "SQRT takes a REAL"),
    ("      PROGRAM P\n      LOGICAL L\n      X = L + 1\n      END\n", 3, 11, "needs numbers"),
    ("      PROGRAM P\n      LOGICAL L\n      L = L .LT. .TRUE.\n      END\n", 3, 11, ".EQV."),
    ("      PROGRAM P\n      DIMENSION A(3)\n      X = A(1.5)\n      END\n", 3, 13, "subscript is an INTEGER"),
    ("      PROGRAM P\n      DIMENSION A(3)\n      X = A\n      END\n", 3, 11, "A is an array"),
    ("      PROGRAM P\n      I = 2\n      ADF(I)\n      Y = I\n      END ADF\n      END\n", 3, 11, "only REAL and DOUBLE"),
    ("      FUNCTION F(X)\n      F = X\n      END\n      PROGRAM P\n      CALL F(1.0)\n      END\n", 5, 12, "is a FUNCTION"),
    ("      SUBROUTINE S(X)\n      X = 1\n      END\n      PROGRAM P\n      CALL S(1, 2)\n      END\n", 5, 7, "takes 1 argument"),
    ("      SUBROUTINE S(X)\n      X = 1\n      END\n      PROGRAM P\n      CALL S(1)\n      END\n", 5, 14, "is REAL, this is INTEGER"),
    ("      PROGRAM P\n      Y = FOO(1.0)\n      END\n", 2, 11, "no array or function named FOO"),
    // Unbalanced blocks.
    ("      PROGRAM P\n      X = 1\n      ADF(X)\n      Y = X*X\n      END\n", 3, 7, "not closed by END ADF"),
    ("      PROGRAM P\n      Y = 1\n      END ADF(D = TANGENT(Y))\n      END\n", 3, 7, "END ADF without ADF"),
    ("      PROGRAM P\n      ADR(Y)\n      Y = 1\n      END ADF\n      END\n", 4, 7, "END ADF closes the ADR block"),
    ("      PROGRAM P\n      ADF(X)\n      Y = X\n      END ADF(D = COTANGENT(Y))\n      END\n", 4, 19, "COTANGENT belongs to ADR"),
    ("      PROGRAM P\n      IF (.TRUE.) THEN\n      X = 1\n      END\n", 2, 7, "not closed by END IF"),
    ("      PROGRAM P\n      DO 10 I = 1, 2\n      X = 1\n      END\n", 2, 7, "no statement labelled 10"),
    ("      PROGRAM P\n      END IF\n      END\n", 2, 7, "END IF without IF"),
    // Jumps and labels.
    ("      PROGRAM P\n      GOTO 10\n      DO 20 I = 1, 3\n   10 X = I\n   20 CONTINUE\n      END\n", 2, 12, "into a DO loop"),
    ("      PROGRAM P\n      ADF(X)\n      GOTO 10\n      END ADF\n   10 END\n", 3, 12, "leave or enter an ADF"),
    ("      PROGRAM P\n      ADF(X)\n      RETURN\n      END ADF\n      END\n", 3, 7, "RETURN inside"),
    ("      PROGRAM P\n   10 X = 1\n   10 Y = 2\n      END\n", 3, 4, "label 10 is defined twice"),
    // Lexical.
    ("  x   PROGRAM P\n      END\n", 1, 3, "label field"),
    ("      PROGRAM P\n      X = 1 ; Y = 2\n      END\n", 2, 13, "unexpected character"),
    // Program structure.
    ("      SUBROUTINE S\n      END\n", 1, 1, "no main program"),
    ("      PROGRAM P\n      X = 1\n", 1, 7, "has no END"),
    // Aliasing that copy-in/copy-out cannot honour.
    (
        "      PROGRAM P\n      X = 1\n        FUNCTION G(T)\n        X = X + T\n        G = X\n        END\n      CALL S(G, X)\n      END\n      SUBROUTINE S(F, Y)\n      Y = F(Y)\n      END\n",
        7,
        7,
        "aliasing",
    ),
];

#[test]
fn errors_name_their_line_and_column() {
    let mut failures = Vec::new();
    for (src, line, col, msg) in CASES {
        let (l, c, m) = error(src);
        if (l, c) != (*line, *col) || !m.contains(msg) {
            failures.push(format!(
                "expected {line}:{col} `{msg}`, got {l}:{c} `{m}` for\n{src}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn arbitrary_text_never_panics() {
    // Every prefix of a valid program, and some noise: errors, never panics.
    let program = include_str!("../../../examples/farfel/equilibrium.f");
    let mut cut = 0;
    while cut < program.len() {
        let _ = common::run(&program[..cut], &[1.0, 1.0, 2.0]);
        cut += 37;
    }
    for noise in [
        "",
        "\n\n",
        "      (((((((",
        "      X = ((((((((((((((((((((((((((((((((((((1",
        "     1",
        "      END\n      END\n",
        "      PROGRAM P\n      X = -----------------1\n      END\n",
        "\t\t\tGOTO",
        "      PROGRAM P\n      ADF((TANGENT(X)=1, I=1\n      END\n",
    ] {
        let _ = common::run(noise, &[]);
    }
}
