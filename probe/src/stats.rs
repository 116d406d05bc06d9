//! Run statistics, computed the way the Python side checks them: sample standard
//! deviation (n-1) and percentiles by linear interpolation (numpy's default method).

/// Summary statistics of one run's measured values.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    pub n: usize,
    pub mean: f64,
    pub median: f64,
    pub stddev: f64,
    pub min: f64,
    pub max: f64,
    pub p95: f64,
    pub p99: f64,
}

/// Percentile `q` (0..=100) of already sorted values, numpy's "linear" method.
pub fn percentile_sorted(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q / 100.0 * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let t = pos - lo as f64;
    let (a, b) = (sorted[lo], sorted[hi]);
    // numpy's lerp: the two forms keep the result exact at both ends.
    if t >= 0.5 {
        b - (b - a) * (1.0 - t)
    } else {
        a + (b - a) * t
    }
}

/// Mean of the values (NaN when empty).
pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.iter().sum::<f64>() / values.len() as f64
}

/// Sample standard deviation (n-1 in the denominator); NaN below two values.
pub fn stddev(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return f64::NAN;
    }
    let m = mean(values);
    let ss: f64 = values.iter().map(|v| (v - m) * (v - m)).sum();
    (ss / (values.len() - 1) as f64).sqrt()
}

/// Median of unsorted values.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    percentile_sorted(&v, 50.0)
}

impl Stats {
    /// Statistics of a run; `None` when there are no values.
    pub fn of(values: &[f64]) -> Option<Stats> {
        if values.is_empty() {
            return None;
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        Some(Stats {
            n: values.len(),
            mean: mean(values),
            median: percentile_sorted(&sorted, 50.0),
            stddev: stddev(values),
            min: sorted[0],
            max: sorted[sorted.len() - 1],
            p95: percentile_sorted(&sorted, 95.0),
            p99: percentile_sorted(&sorted, 99.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_match_numpy_linear() {
        // numpy.percentile([1, 2, 3, 4, 10], [50, 95, 99]) == [3.0, 8.8, 9.76]
        let v = [4.0, 1.0, 10.0, 3.0, 2.0];
        let s = Stats::of(&v).unwrap();
        assert_eq!(s.median, 3.0);
        assert!((s.p95 - 8.8).abs() < 1e-12);
        assert!((s.p99 - 9.76).abs() < 1e-12);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 10.0);
    }

    #[test]
    fn even_median_interpolates() {
        assert_eq!(median(&[1.0, 2.0, 3.0, 4.0]), 2.5);
    }

    #[test]
    fn stddev_is_sample_stddev() {
        // numpy.std([9100, 9120, 9080, 9200], ddof=1)
        let s = stddev(&[9100.0, 9120.0, 9080.0, 9200.0]);
        assert!((s - 52.599_112_793_531_67).abs() < 1e-9);
        assert!(stddev(&[1.0]).is_nan());
    }

    #[test]
    fn single_value_and_empty() {
        let s = Stats::of(&[5.0]).unwrap();
        assert_eq!((s.median, s.p95, s.p99), (5.0, 5.0, 5.0));
        assert!(Stats::of(&[]).is_none());
    }
}
