C     ASTAR & BSTAR: GUESSES IN, OPTIMIZED VALUES OUT
      SUBROUTINE EQLBRM(BIGA, BIGB, ASTAR, BSTAR, N)
      EXTERNAL BIGA, BIGB
        FUNCTION F(ASTAR)
          FUNCTION G(A)
            FUNCTION H(B)
            H = BIGB(ASTAR, B)
            END
          BSTAR = ARGMAX(H, BSTAR, N)
          G = BIGA(A, BSTAR)
          END
        F = ARGMAX(G, ASTAR, N)-ASTAR
        END
      ASTAR = ROOT(F, ASTAR, N)
      END
      FUNCTION ROOT(F, X0, N)
      X = X0
      DO 1669 I=1,N
      CALL DERIV2(F, X, Y, YPRIME)
 1669 X = X-Y/YPRIME
      ROOT = X
      END
      SUBROUTINE DERIV2(F, X, Y, YPRIME)
      EXTERNAL F
      ADF(X)
      Y = F(X)
      END ADF(YPRIME = TANGENT(Y))
      END
      FUNCTION ARGMAX(F, X0, N)
        FUNCTION FPRIME(X)
        FPRIME = DERIV1(F, X)
        END
      ARGMAX = ROOT(FPRIME, X0, N)
      END
      FUNCTION DERIV1(F, X)
      EXTERNAL F
      ADF(X)
      Y = F(X)
      END ADF(DERIV1 = TANGENT(Y))
      END
      FUNCTION GMBIGA(A, B)
      PRICE = 20-0.1*A-0.1*B
      COSTS = A*(10-0.05*A)
      GMBIGA = A*PRICE-COSTS
      END
      FUNCTION GMBIGB(A, B)
      PRICE = 20-0.1*B-0.0999*A
      COSTS = B*(10.005-0.05*B)
      GMBIGB = B*PRICE-COSTS
      END
      PROGRAM MAIN
      READ *, ASTAR
      READ *, BSTAR
      READ *, N
      CALL EQLBRM(GMBIGA, GMBIGB, ASTAR, BSTAR, N)
      PRINT *, ASTAR, BSTAR
      END
