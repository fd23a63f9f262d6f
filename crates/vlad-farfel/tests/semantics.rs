//! Fortran 77 semantics, through the lowering and the evaluator: each expectation is what the
//! Fortran standard (and gfortran) gives for the program.

mod common;
use common::{run, run_numbers};

#[test]
fn integer_arithmetic_truncates_and_mixes_with_reals() {
    let src = r#"
      PROGRAM P
      INTEGER I, J
      I = -7
      J = 2
      PRINT *, I/J, 7/(-2), MOD(I, J), MOD(7, -2), I*0, -I, 2**10,
     &         2**(-1)
      PRINT *, (-2)**3, I/J*J, REAL(I)/J, 1/2*4.0, 4.0*1/2, 3**2**2
      X = 3.9
      I = X
      J = -X
      PRINT *, I, J, INT(-2.7), NINT(2.5), NINT(-2.5), ABS(-3),
     &         ABS(-1.5)
      PRINT *, MAX(1, 5, 3), MIN(2.5, 1.5, 7.0), SIGN(3.0, -1.0),
     &         MOD(7.5, 2.0)
      END
"#;
    assert_eq!(
        run_numbers(src, &[]),
        vec![
            -3.0, -3.0, -1.0, 1.0, 0.0, 7.0, 1024.0, 0.0, //
            -8.0, -6.0, -3.5, 0.0, 2.0, 81.0, //
            3.0, -3.0, -2.0, 3.0, -3.0, 3.0, 1.5, //
            5.0, 1.5, -3.0, 1.5
        ]
    );
    // INTEGER zero is never printed as -0.
    assert!(!run(src, &[]).unwrap().contains("-0 "));
}

#[test]
fn do_loops_follow_the_iteration_count_rule() {
    let src = r#"
      PROGRAM P
      K = 0
      DO 10 I = 1, 0
   10 K = K + 1
      PRINT *, K, I
      DO 20 I = 10, 1, -3
   20 K = K + I
      PRINT *, K, I
      N = 3
      DO 30 I = 1, N
C     Changing the bound inside does not change the count.
      N = 100
   30 CONTINUE
      PRINT *, I, N
      S = 0
      DO 40 X = 0.5, 2.0, 0.5
   40 S = S + X
      PRINT *, S, X
      DO I = 1, 3
         DO J = I, 3
            K = K + 10*I + J
         END DO
      END DO
      PRINT *, K
      DO 50 I = 1, 3
      DO 50 J = 1, 2
   50 K = K - 1
      PRINT *, K, I, J
      END
"#;
    // 10 + 7 + 4 + 1 = 22; I = 10 - 4*3 = -2.
    // Nested: (11+12+13) + (22+23) + 33 = 114, so K = 22 + 114 = 136; then 6 decrements.
    assert_eq!(
        run_numbers(src, &[]),
        vec![0.0, 1.0, 22.0, -2.0, 4.0, 100.0, 5.0, 2.5, 136.0, 130.0, 4.0, 3.0]
    );
}

#[test]
fn goto_if_blocks_and_labels() {
    let src = r#"
      PROGRAM P
      LOGICAL L
      N = 27
      K = 0
   10 IF (N .EQ. 1) GOTO 20
      IF (MOD(N, 2) .EQ. 0) THEN
         N = N / 2
      ELSE IF (N .GT. 1000000) THEN
         GOTO 99
      ELSE
         N = 3*N + 1
      END IF
      K = K + 1
      GOTO 10
   20 PRINT *, K
      S = 0
      DO 30 I = 1, 10
      IF (MOD(I, 3) .EQ. 0) GOTO 30
      S = S + I
   30 CONTINUE
      L = S .GT. 30 .AND. .NOT. (K .LT. 100) .OR. .FALSE.
      PRINT *, S, L, L .EQV. .TRUE., L .NEQV. .TRUE.
   99 END
"#;
    let out = run(src, &[]).unwrap();
    assert_eq!(out, "111\n(37 #t #t #f)\n");
}

#[test]
fn arguments_are_passed_by_reference() {
    let src = r#"
      SUBROUTINE SWAP(A, B)
      T = A
      A = B
      B = T
      END
      SUBROUTINE FILL(V, N, X)
      DIMENSION V(N)
      DO 10 I = 1, N
   10 V(I) = X * I
      END
      FUNCTION BUMP(K)
      K = K + 1
      BUMP = 2 * K
      END
      PROGRAM P
      DIMENSION W(3)
      X = 1
      Y = 2
      CALL SWAP(X, Y)
      PRINT *, X, Y
      CALL FILL(W, 3, 0.5)
      PRINT *, W
      CALL SWAP(W(1), W(3))
      PRINT *, W
C     An expression (even a parenthesised variable) is not written back.
      CALL SWAP((X), Y)
      PRINT *, X, Y
      K = 5
      Z = BUMP(K)
      PRINT *, Z, K
      END
"#;
    assert_eq!(
        run(src, &[]).unwrap(),
        "(2 1)\n#(0.5 1 1.5)\n#(1.5 1 0.5)\n(2 2)\n(12 6)\n"
    );
}

#[test]
fn nested_subprograms_share_their_enclosing_variables() {
    // G changes COUNT and TOTAL, which belong to S; G travels to APPLY as an argument and
    // its changes come back. I, undeclared, belongs to the top-level subprogram S (paper 000:
    // implicitly declared variables have the top-level subprogram as their scope).
    let src = r#"
      SUBROUTINE S(X, TOTAL)
      INTEGER COUNT
        FUNCTION G(T)
        COUNT = COUNT + 1
        I = COUNT
        TOTAL = TOTAL + T
        G = T * X
        END
      COUNT = 0
      TOTAL = 0
      Y = APPLY(G, 3.0)
      Y = Y + APPLY(G, 4.0)
      PRINT *, Y, COUNT, I
      END
      FUNCTION APPLY(F, V)
      APPLY = F(V) + F(V + 1)
      END
      PROGRAM P
      CALL S(2.0, T)
      PRINT *, T
      END
"#;
    // APPLY(G, 3) = 6 + 8, APPLY(G, 4) = 8 + 10; four calls; TOTAL = 3+4+4+5.
    assert_eq!(run_numbers(src, &[]), vec![32.0, 4.0, 4.0, 16.0]);
}

#[test]
fn scopes_shadow_and_parameters_fold() {
    let src = r#"
      PROGRAM P
      PARAMETER (N = 3, H = 1.0 / N, M = N * 2)
      X = 10
      Y = F(1.0)
      PRINT *, Y, X, M
        FUNCTION F(X)
        F = X * H
        END
      END
"#;
    let v = run_numbers(src, &[]);
    assert!((v[0] - 1.0 / 3.0).abs() < 1e-15, "{v:?}");
    assert_eq!(&v[1..], &[10.0, 6.0]);
}

#[test]
fn arrays_with_bounds_and_implied_do_io() {
    let src = r#"
      PROGRAM P
      INTEGER A(0:2, 3)
      DOUBLE PRECISION V(4)
      DO 10 J = 1, 3
      DO 10 I = 0, 2
   10 A(I, J) = 10*I + J
      PRINT *, ((A(I, J), J = 1, 3), I = 0, 2)
      READ *, N, (V(I), I = 1, N)
      PRINT *, N, V
      READ *, V
      PRINT *, V(4) - V(1)
      END
"#;
    assert_eq!(
        run(src, &[2.0, 1.5, 2.5, 9.0, 8.0, 7.0, 6.5]).unwrap(),
        "(1 2 3 11 12 13 21 22 23)\n(2 #(1.5 2.5 0 0))\n-2.5\n"
    );
}

#[test]
fn text_past_column_72_is_ignored_and_errors_say_so() {
    let src = format!(
        "      PROGRAM P\n      X = 1 +{}2\n      END\n",
        " ".repeat(72 - 13)
    );
    let e = run(&src, &[]).unwrap_err();
    assert!(e.contains("past column 72"), "{e}");
}

#[test]
fn reading_past_the_input_is_an_error_at_the_read() {
    let src = "      PROGRAM P\n      READ *, X\n      END\n";
    let e = run(src, &[]).unwrap_err();
    assert!(e.starts_with("test.f:2:"), "{e}");
    assert!(e.contains("end of input"), "{e}");
}

#[test]
fn array_bounds_are_checked() {
    let src = "      PROGRAM P\n      DIMENSION A(3)\n      I = 4\n      A(I) = 1\n      END\n";
    let e = run(src, &[]).unwrap_err();
    assert!(e.starts_with("test.f:4:7:"), "{e}");
    assert!(e.contains("out of range"), "{e}");
}
