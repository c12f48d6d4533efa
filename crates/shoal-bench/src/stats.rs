//! Statistics of the experiments' samples: mean and standard deviation,
//! percentiles, Student's t confidence intervals, and how a sample is
//! written in a table cell.

use serde_json::{json, Value};

/// Mean and sample standard deviation (NaN for no samples; SD 0 for one).
pub fn mean_sd(xs: &[f64]) -> (f64, f64) {
    if xs.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    if xs.len() < 2 {
        return (mean, 0.0);
    }
    let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// The `p`-th percentile (0–100) of `xs`, in any order, interpolated
/// linearly between the closest ranks (R's and NumPy's default); NaN for
/// no samples.
pub fn percentile(xs: &[f64], p: f64) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    percentile_sorted(&v, p)
}

/// [`percentile`] of values already sorted ascending.
fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let h = (n - 1) as f64 * (p / 100.0).clamp(0.0, 1.0);
            let lo = h.floor() as usize;
            let hi = (lo + 1).min(n - 1);
            sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
        }
    }
}

/// The 50th percentile.
pub fn median(xs: &[f64]) -> f64 {
    percentile(xs, 50.0)
}

/// The 95th percentile.
pub fn p95(xs: &[f64]) -> f64 {
    percentile(xs, 95.0)
}

/// Summary statistics of a sample.
#[derive(Clone, Debug, PartialEq)]
pub struct Stats {
    pub n: usize,
    pub mean: f64,
    /// Sample standard deviation.
    pub sd: f64,
    /// Half-width of the 95% confidence interval of the mean (Student's t).
    pub ci95: f64,
    pub median: f64,
    pub p95: f64,
    pub p99: f64,
    pub min: f64,
    pub max: f64,
}

impl Stats {
    /// The statistics as a JSON object (the keys are the field names).
    pub fn json(&self) -> Value {
        json!({"n": self.n, "mean": self.mean, "sd": self.sd, "ci95": self.ci95, "median": self.median, "p95": self.p95, "p99": self.p99, "min": self.min, "max": self.max})
    }
}

/// The 97.5% quantile of Student's t distribution with `df` degrees of
/// freedom (two-sided 95%). Between table rows the smaller df's value is
/// used, so the interval is never narrower than the exact one.
pub fn t975(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080,
        2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::NAN,
        1..=30 => T[df - 1],
        31..=40 => 2.042,
        41..=60 => 2.021,
        61..=120 => 2.000,
        _ => 1.980,
    }
}

/// Statistics of `xs` (NaN everywhere for an empty sample).
pub fn stats(xs: &[f64]) -> Stats {
    let (mean, sd) = mean_sd(xs);
    let mut s: Vec<f64> = xs.to_vec();
    s.sort_by(f64::total_cmp);
    let n = xs.len();
    let ci95 = if n >= 2 { t975(n - 1) * sd / (n as f64).sqrt() } else { f64::NAN };
    Stats {
        n,
        mean,
        sd,
        ci95,
        median: percentile_sorted(&s, 50.0),
        p95: percentile_sorted(&s, 95.0),
        p99: percentile_sorted(&s, 99.0),
        min: s.first().copied().unwrap_or(f64::NAN),
        max: s.last().copied().unwrap_or(f64::NAN),
    }
}

/// A sample as "MEAN ± SD" with `digits` decimals, "-" when empty.
pub fn fmt(v: &[f64], digits: usize) -> String {
    if v.is_empty() {
        return "-".into();
    }
    let (m, sd) = mean_sd(v);
    format!("{m:.digits$} ± {sd:.digits$}")
}

/// One value with `digits` decimals, "–" when it is not finite (not measured).
pub fn fixed(v: f64, digits: usize) -> String {
    if v.is_finite() {
        format!("{v:.digits$}")
    } else {
        "–".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_sd() {
        let (m, sd) = mean_sd(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert!((m - 5.0).abs() < 1e-9);
        assert!((sd - 2.138).abs() < 1e-3);
        assert_eq!(mean_sd(&[3.0]), (3.0, 0.0));
    }

    #[test]
    fn median_and_p95() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[7.0]), 7.0);
        assert_eq!(p95(&[7.0]), 7.0);
        assert!(median(&[]).is_nan());
        assert!(p95(&[]).is_nan());
        let xs: Vec<f64> = (1..=20).map(f64::from).collect();
        assert!((p95(&xs) - 19.05).abs() < 1e-9);
        assert_eq!(percentile(&xs, 0.0), 1.0);
        assert_eq!(percentile(&xs, 100.0), 20.0);
        let ys: Vec<f64> = (1..=21).rev().map(f64::from).collect();
        assert_eq!(p95(&ys), 20.0);
        assert_eq!(median(&ys), 11.0);
    }

    #[test]
    fn cells() {
        assert_eq!(fmt(&[], 1), "-");
        assert_eq!(fmt(&[1.0, 3.0], 1), "2.0 ± 1.4");
        assert_eq!(fixed(f64::NAN, 2), "–");
        assert_eq!(fixed(1.234, 1), "1.2");
    }

    #[test]
    fn percentiles_interpolate_between_ranks() {
        let s = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(percentile(&s, 50.0), 3.0);
        assert_eq!(percentile(&s, 0.0), 1.0);
        assert_eq!(percentile(&s, 100.0), 5.0);
        assert!((percentile(&s, 95.0) - 4.8).abs() < 1e-12);
        assert!((percentile(&[10.0, 20.0], 25.0) - 12.5).abs() < 1e-12);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        assert!(percentile(&[], 50.0).is_nan());
    }

    #[test]
    fn mean_sd_and_confidence_interval() {
        let s = stats(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!(s.n, 8);
        assert!((s.mean - 5.0).abs() < 1e-12);
        assert!((s.sd - 2.138_089_935).abs() < 1e-6);
        // t(7) = 2.365: 2.365 × 2.138 / √8.
        assert!((s.ci95 - 2.365 * 2.138_089_935 / 8f64.sqrt()).abs() < 1e-6, "{s:?}");
        assert_eq!((s.min, s.max, s.median), (2.0, 9.0, 4.5));
        // Large samples approach the normal 1.96, never below it.
        assert_eq!(t975(1), 12.706);
        assert_eq!(t975(35), 2.042);
        assert_eq!(t975(99), 2.000);
        assert_eq!(t975(10_000), 1.980);
        let one = stats(&[3.0]);
        assert_eq!((one.mean, one.sd), (3.0, 0.0));
        assert!(one.ci95.is_nan());
        assert!(stats(&[]).mean.is_nan());
    }
}
