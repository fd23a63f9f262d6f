C     The equilibrium example of paper 000 with derivatives written by
C     hand: the same nested Newton iterations as Listing 1
C     (examples/farfel/equilibrium.f), N steps at each of three levels,
C     BSTAR moved by every evaluation of G as there, and the tangents
C     that forward AD carries, but only the nonzero ones (what an
C     activity analysis keeps). Plain Fortran 77 for gfortran: the
C     baseline of benches/run-farfel.sh. Reads A0, B0, N; prints A*, B*.
      PROGRAM MAIN
      DOUBLE PRECISION ASTAR, BSTAR
      INTEGER N
      READ *, ASTAR
      READ *, BSTAR
      READ *, N
      CALL EQLBRM(ASTAR, BSTAR, N)
      PRINT *, ASTAR, BSTAR
      END
C     A* = ROOT(F, A0, N): Newton's method on F.
      SUBROUTINE EQLBRM(ASTAR, BSTAR, N)
      DOUBLE PRECISION ASTAR, BSTAR, X, Y, YP
      INTEGER N, I
      X = ASTAR
      DO 10 I = 1, N
      CALL F(X, BSTAR, N, Y, YP)
   10 X = X - Y/YP
      ASTAR = X
      END
C     F(X) = ARGMAX(G, X, N) - X and dF/dX, where G(A) = GMBIGA(A, B)
C     after B = ARGMAX(H, B, N), H(B) = GMBIGB(X, B). ARGMAX is Newton's
C     method on the derivative; DA and DB are the X-tangents of A and B.
      SUBROUTINE F(X, BSTAR, N, Y, YP)
      DOUBLE PRECISION X, BSTAR, Y, YP, A, DA, B, DB, G1, G2, DG1
      DOUBLE PRECISION DGADA, D2GADA, D2GADB
      INTEGER N, I
      A = X
      DA = 1
      B = BSTAR
      DB = 0
      DO 10 I = 1, N
         CALL BEST(X, B, DB, N)
         G1 = DGADA(A, B)
         G2 = D2GADA(A, B)
         DG1 = G2*DA + D2GADB(A, B)*DB
C        The second derivative is constant: its tangent is 0.
         A = A - G1/G2
         DA = DA - DG1/G2
   10 CONTINUE
      BSTAR = B
      Y = A - X
      YP = DA - 1
      END
C     B = ARGMAX(H, B, N) for H(B) = GMBIGB(X, B), with DB, B's tangent
C     for a unit tangent of X.
      SUBROUTINE BEST(X, B, DB, N)
      DOUBLE PRECISION X, B, DB, H1, H2, DH1
      DOUBLE PRECISION DGBDB, D2GBDB, D2GBDA
      INTEGER N, I
      DO 10 I = 1, N
         H1 = DGBDB(X, B)
         H2 = D2GBDB(X, B)
         DH1 = H2*DB + D2GBDA(X, B)
         B = B - H1/H2
         DB = DB - DH1/H2
   10 CONTINUE
      END
C     The payoffs' partial derivatives, derived by hand from
C       GMBIGA = A*(20-0.1*A-0.1*B) - A*(10-0.05*A)
C       GMBIGB = B*(20-0.1*B-0.0999*A) - B*(10.005-0.05*B)
      DOUBLE PRECISION FUNCTION DGADA(A, B)
      DOUBLE PRECISION A, B
      DGADA = (20-0.1D0*A-0.1D0*B) - 0.1D0*A - (10-0.05D0*A)
     &      + 0.05D0*A
      END
      DOUBLE PRECISION FUNCTION D2GADA(A, B)
      DOUBLE PRECISION A, B
      D2GADA = -0.1D0 - 0.1D0 + 0.05D0 + 0.05D0
      END
      DOUBLE PRECISION FUNCTION D2GADB(A, B)
      DOUBLE PRECISION A, B
      D2GADB = -0.1D0
      END
      DOUBLE PRECISION FUNCTION DGBDB(A, B)
      DOUBLE PRECISION A, B
      DGBDB = (20-0.1D0*B-0.0999D0*A) - 0.1D0*B - (10.005D0-0.05D0*B)
     &      + 0.05D0*B
      END
      DOUBLE PRECISION FUNCTION D2GBDB(A, B)
      DOUBLE PRECISION A, B
      D2GBDB = -0.1D0 - 0.1D0 + 0.05D0 + 0.05D0
      END
      DOUBLE PRECISION FUNCTION D2GBDA(A, B)
      DOUBLE PRECISION A, B
      D2GBDA = -0.0999D0
      END
