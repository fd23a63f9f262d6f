//! ADF and ADR blocks, alone and nested in each other, against central finite differences of
//! the same program's printed values.

mod common;
use common::run_numbers;

/// F: loops, branches, intrinsics, array elements; GRAD its gradient by ADR. The main program
/// prints F, its gradient, and H v four ways: forward over reverse, reverse over forward,
/// reverse over reverse; then v'Hv by forward over forward.
const PROGRAM: &str = r#"
      DOUBLE PRECISION FUNCTION F(X, N)
      DOUBLE PRECISION X(N), S, T
      S = 0
      DO 10 I = 1, N
         T = X(I)
         IF (T .GT. 0.5D0) THEN
            S = S + T**3 * SIN(X(MOD(I, N) + 1))
         ELSE
            S = S + EXP(T) * SQRT(1 + T*T) - ATAN2(T, 2D0)
         END IF
   10 CONTINUE
      F = S / N + LOG(1 + X(1)**2) * TAN(0.3D0 * X(N)) + MAX(X(2), 0D0)
      END
      SUBROUTINE GRAD(X, N, G)
      DOUBLE PRECISION X(N), G(N), Y, F
      ADR(Y)
      Y = F(X, N)
      END ADR((G(I) = COTANGENT(X(I)), I = 1, N))
      END
      PROGRAM MAIN
      PARAMETER (N = 3)
      DOUBLE PRECISION X(N), G(N), V(N), HV(N), D, D2, Y, F
      READ *, X, V
      PRINT *, F(X, N)
      CALL GRAD(X, N, G)
      PRINT *, G
C     Forward over reverse.
      ADF((TANGENT(X(I)) = V(I), I = 1, N))
      CALL GRAD(X, N, G)
      END ADF((HV(I) = TANGENT(G(I)), I = 1, N))
      PRINT *, HV
C     Reverse over forward: the gradient of the directional derivative.
      ADR(D)
      ADF((TANGENT(X(I)) = V(I), I = 1, N))
      Y = F(X, N)
      END ADF(D = TANGENT(Y))
      END ADR((HV(I) = COTANGENT(X(I)), I = 1, N))
      PRINT *, HV
C     Reverse over reverse: the gradient of G . V.
      ADR(D)
      CALL GRAD(X, N, G)
      D = 0
      DO 20 I = 1, N
   20 D = D + G(I) * V(I)
      END ADR((HV(I) = COTANGENT(X(I)), I = 1, N))
      PRINT *, HV
C     Forward over forward.
      ADF((TANGENT(X(I)) = V(I), I = 1, N))
      ADF((TANGENT(X(I)) = V(I), I = 1, N))
      Y = F(X, N)
      END ADF(D = TANGENT(Y))
      END ADF(D2 = TANGENT(D))
      PRINT *, D2
      END
"#;

const N: usize = 3;

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * (1.0 + a.abs().max(b.abs()))
}

#[test]
fn nested_forward_and_reverse_blocks_agree_with_finite_differences() {
    let x = [0.3, 0.8, -0.4];
    let v = [0.7, -1.1, 0.5];
    let at = |x: &[f64; N]| {
        let inputs: Vec<f64> = x.iter().chain(&v).copied().collect();
        let out = run_numbers(PROGRAM, &inputs);
        assert_eq!(out.len(), 1 + 4 * N + 1, "{out:?}");
        out
    };
    let base = at(&x);
    let grad = &base[1..1 + N];
    let h = 1e-5;
    let mut fd_grad = [0.0; N];
    let mut fd_hv = [0.0; N];
    for i in 0..N {
        let (mut xp, mut xm) = (x, x);
        xp[i] += h;
        xm[i] -= h;
        let (p, m) = (at(&xp), at(&xm));
        fd_grad[i] = (p[0] - m[0]) / (2.0 * h);
        for k in 0..N {
            // Column i of the Hessian, from the reverse-mode gradient, weighted by v_i.
            fd_hv[k] += v[i] * (p[1 + k] - m[1 + k]) / (2.0 * h);
        }
    }
    for i in 0..N {
        assert!(
            close(grad[i], fd_grad[i], 1e-7),
            "ADR gradient {i}: {} vs {}",
            grad[i],
            fd_grad[i]
        );
    }
    let ways = ["ADF over ADR", "ADR over ADF", "ADR over ADR"];
    for (w, name) in ways.iter().enumerate() {
        let hv = &base[1 + N + w * N..1 + 2 * N + w * N];
        for k in 0..N {
            assert!(
                close(hv[k], fd_hv[k], 1e-6),
                "{name}, H v [{k}]: {} vs {}",
                hv[k],
                fd_hv[k]
            );
        }
    }
    let vhv: f64 = v.iter().zip(&fd_hv).map(|(a, b)| a * b).sum();
    let d2 = base[1 + 4 * N];
    assert!(close(d2, vhv, 1e-6), "ADF over ADF, v'Hv: {d2} vs {vhv}");
}

#[test]
fn adf_shorthand_and_directional_derivatives() {
    let src = r#"
      PROGRAM P
      READ *, A, B
      PRINT *, G(A, B)
      ADF(A)
      Y = G(A, B)
      END ADF(DA = TANGENT(Y))
      ADF(TANGENT(A) = 0, TANGENT(B) = 1)
      Y = G(A, B)
      END ADF(DB = TANGENT(Y))
      PRINT *, DA, DB
      END
      FUNCTION G(A, B)
      G = A**2 * COS(B) / (1 + ABS(A - B))
      END
"#;
    let (a, b, h) = (1.3, 0.4, 1e-6);
    let d = run_numbers(src, &[a, b]);
    let da = (run_numbers(src, &[a + h, b])[0] - run_numbers(src, &[a - h, b])[0]) / (2.0 * h);
    let db = (run_numbers(src, &[a, b + h])[0] - run_numbers(src, &[a, b - h])[0]) / (2.0 * h);
    assert!(close(d[1], da, 1e-6), "{} vs {da}", d[1]);
    assert!(close(d[2], db, 1e-6), "{} vs {db}", d[2]);
}

#[test]
fn derivatives_reach_nested_subprograms_through_their_environment() {
    // G reads A from S's scope; A is the independent variable of the block, so G must see
    // A's perturbation (a captured constant would give 0). H changes COUNT in S's scope
    // inside the block; the change survives the block.
    let src = r#"
      SUBROUTINE S(A, D, E, COUNT)
      INTEGER COUNT
        FUNCTION G(T)
        G = A * T * T
        COUNT = COUNT + 1
        END
      ADF(A)
      Y = G(3.0) + G(A)
      END ADF(D = TANGENT(Y))
      ADR(Y)
      Y = G(A)
      END ADR(E = COTANGENT(A))
      END
      PROGRAM P
      INTEGER K
      K = 0
      READ *, A
      CALL S(A, D, E, K)
      PRINT *, D, E, K
      END
"#;
    let a = 1.7;
    let out = run_numbers(src, &[a]);
    // d/dA (9A + A^3) and d/dA A^3.
    assert!(close(out[0], 9.0 + 3.0 * a * a, 1e-12), "{out:?}");
    assert!(close(out[1], 3.0 * a * a, 1e-12), "{out:?}");
    assert_eq!(out[2], 3.0);
}

#[test]
fn cotangents_are_seeded_after_the_forward_phase() {
    // Paper 000 §2: the opening cotangent expressions are evaluated at the end of the forward
    // phase, so they may use its results: here the seed is Y itself, giving d(Y^2/2)/dX.
    let src = r#"
      PROGRAM P
      READ *, X
      ADR(COTANGENT(Y) = Y)
      Y = SIN(X) * X
      END ADR(D = COTANGENT(X))
      PRINT *, Y, D
      END
"#;
    let x = 0.9f64;
    let out = run_numbers(src, &[x]);
    let y = x.sin() * x;
    assert!(close(out[0], y, 1e-15));
    assert!(close(out[1], y * (x.cos() * x + x.sin()), 1e-12), "{out:?}");
}

#[test]
fn integers_have_no_derivative() {
    // INT is flat: its derivative is 0 although the truncation is computed from X.
    let src = r#"
      PROGRAM P
      X = 2.75
      ADF(X)
      Y = INT(X * 3) + X
      END ADF(D = TANGENT(Y))
      PRINT *, Y, D
      END
"#;
    assert_eq!(run_numbers(src, &[]), vec![10.75, 1.0]);
}
