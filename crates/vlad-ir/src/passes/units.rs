//! Translation units: which functions go together when a large program is compiled as several
//! units in parallel. GCC inlines only within a unit, so each function goes to the unit that
//! already holds most of the functions it calls or is called by (its neighbours in the call
//! graph, `ir::callees`), within a size budget.

/// Assigns items of these sizes to `n` units, those of `fixed` to their unit. In order, each
/// other item goes to the unit that holds most of its neighbours (with multiplicity) among the
/// units with room for it, ties to the emptiest; a unit has room up to its share of the total
/// plus 8 %, and when none has, the emptiest takes it.
pub fn partition(
    sizes: &[usize],
    neighbours: &[Vec<usize>],
    n: usize,
    fixed: &[Option<usize>],
) -> Vec<usize> {
    let total = sizes.iter().sum::<usize>();
    let cap = total as f64 / n as f64 * 1.08;
    let mut fill = vec![0usize; n];
    let mut unit = vec![usize::MAX; sizes.len()];
    for (i, u) in fixed.iter().enumerate() {
        if let Some(u) = u {
            unit[i] = *u;
            fill[*u] += sizes[i];
        }
    }
    for (i, &size) in sizes.iter().enumerate() {
        if unit[i] != usize::MAX {
            continue;
        }
        let mut score = vec![0usize; n];
        for &j in &neighbours[i] {
            if unit[j] != usize::MAX {
                score[unit[j]] += 1;
            }
        }
        let emptiest = (0..n).min_by_key(|&u| fill[u]).unwrap_or(0);
        let best = (0..n)
            .filter(|&u| (fill[u] + size) as f64 <= cap)
            .max_by_key(|&u| (score[u], std::cmp::Reverse(fill[u])));
        let u = best.unwrap_or(emptiest);
        unit[i] = u;
        fill[u] += size;
    }
    unit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_keeps_callers_with_callees_and_balances() {
        // Two clusters of four (0-3 call each other, 4-7 call each other), interleaved.
        let sizes = vec![10; 8];
        let mut nb = vec![Vec::new(); 8];
        let edge = |nb: &mut Vec<Vec<usize>>, a: usize, b: usize| {
            nb[a].push(b);
            nb[b].push(a);
        };
        for (a, b) in [(0, 2), (2, 4), (4, 6), (1, 3), (3, 5), (5, 7)] {
            edge(&mut nb, a, b);
        }
        let u = partition(&sizes, &nb, 2, &[None; 8]);
        assert_eq!(u[0], u[2]);
        assert_eq!(u[2], u[4]);
        assert_eq!(u[4], u[6]);
        assert_eq!(u[1], u[3]);
        assert_eq!(u[3], u[5]);
        assert_eq!(u[5], u[7]);
        assert_ne!(u[0], u[1]);
        // Room is bounded: one big cluster is split rather than put in one unit.
        let nb_all: Vec<Vec<usize>> = (0..8)
            .map(|i| (0..8).filter(|&j| j != i).collect())
            .collect();
        let u = partition(&sizes, &nb_all, 2, &[None; 8]);
        assert_eq!(u.iter().filter(|&&x| x == 0).count(), 4);
        // A fixed item stays where it is put, and draws its neighbours.
        let mut fixed = [None; 8];
        fixed[7] = Some(0);
        let u = partition(&sizes, &nb, 2, &fixed);
        assert_eq!(u[7], 0);
    }
}
