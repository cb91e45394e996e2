//! Dampening against the paper's analysis (Appendix B-E, Table XV). Expected counts are
//! derived here from the rule's closed forms, then checked against the paper's figures and
//! against the implementation's behaviour.

use germline_policy::dampening::{Admission, DampeningParams, Event, Penalty};
use rand::{Rng, SeedableRng};

fn params() -> DampeningParams {
    DampeningParams::default()
}

/// Smallest k with w(1-λ^k)/(1-λ) ≥ S: consecutive events from P = 0 until suppression.
fn calls_to_suppress(p: &DampeningParams) -> u32 {
    let l = p.lambda();
    let x = 1.0 - p.suppress_at * (1.0 - l) / p.unverified_weight;
    (x.ln() / l.ln()).ceil() as u32
}

/// Smallest j with P·λ^j < R.
fn calls_to_recover(p: &DampeningParams, from: f64) -> u32 {
    let j = (p.reuse_below / from).ln() / p.lambda().ln();
    if j.fract() == 0.0 {
        j as u32 + 1
    } else {
        j.ceil() as u32
    }
}

#[test]
fn always_diverging_release() {
    let p = params();
    let k = calls_to_suppress(&p);
    let pk = p.unverified_weight * (1.0 - p.lambda().powi(k as i32)) / (1.0 - p.lambda());
    assert_eq!(k, 9, "the paper's 9 calls");
    // The rule gives P = w(1-λ^9)/(1-λ) = 2129.99; the issue and SPEC.md say "about 2124"
    // (the paper's text gives no figure). Both lead to the same 76 refused calls below.
    assert_eq!(pk.round(), 2130.0);
    assert!((pk - 2124.0).abs() < 10.0, "about the issue's 2124");

    let mut pen = Penalty::default();
    let mut admitted = 0;
    while !pen.suppressed {
        assert_eq!(pen.call(&p, Some(Event::Unverified)), Admission::Admitted);
        admitted += 1;
    }
    assert_eq!(admitted, k);
    assert!((pen.value - pk).abs() < 1e-9);

    // Refused calls decay the penalty too; the release keeps diverging whenever it runs.
    let want_refused = calls_to_recover(&p, pk);
    assert_eq!(want_refused, 76);
    let mut refused = 0;
    while pen.call(&p, Some(Event::Unverified)) == Admission::Refused {
        refused += 1;
    }
    assert_eq!(refused, want_refused);
}

#[test]
fn penalty_of_exactly_s_recovers_in_71_calls() {
    let p = params();
    let want = (p.half_life * (p.suppress_at / p.reuse_below).log2()).ceil() as u32;
    assert_eq!(want, 71);
    assert_eq!(calls_to_recover(&p, p.suppress_at), want);
    let mut pen = Penalty {
        value: p.suppress_at,
        suppressed: true,
    };
    let mut refused = 0;
    while pen.admit(&p) == Admission::Refused {
        refused += 1;
    }
    assert_eq!(refused, want);
}

#[test]
fn hysteresis_holds_between_r_and_s() {
    let p = params();
    // Below S after a decay but not yet below R: still suppressed.
    let mut pen = Penalty {
        value: 1000.0,
        suppressed: true,
    };
    assert_eq!(pen.admit(&p), Admission::Refused);
    assert!(pen.suppressed);
    // The same penalty on a release that never crossed S is usable.
    let mut pen = Penalty {
        value: 1000.0,
        suppressed: false,
    };
    assert_eq!(pen.admit(&p), Admission::Admitted);
}

#[test]
fn threshold_rate_and_expected_trajectories() {
    let p = params();
    assert_eq!((p.threshold_rate() * 1000.0).round() / 10.0, 11.0);
    // Along the expected trajectory each call adds p·w: 50% reaches S after 18 calls, 20%
    // after 58, 10% never (10% < p*).
    let reach = |rate: f64| {
        let mut e = 0.0;
        for n in 1..=10_000u32 {
            e = p.lambda() * e + rate * p.unverified_weight;
            if e >= p.suppress_at {
                return Some(n);
            }
        }
        None
    };
    assert_eq!(reach(0.5), Some(18));
    assert_eq!(reach(0.2), Some(58));
    assert_eq!(reach(0.1), None);
}

/// Fraction of `releases` simulated releases, each diverging independently with probability
/// `rate` on every call it runs, that are suppressed at least once within `calls` calls.
fn suppressed_fraction(rate: f64, calls: u32, releases: u32, seed: u64) -> f64 {
    let p = params();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut hit = 0;
    for _ in 0..releases {
        let mut pen = Penalty::default();
        for _ in 0..calls {
            let event = rng.random_bool(rate).then_some(Event::Unverified);
            pen.call(&p, event);
            if pen.suppressed {
                hit += 1;
                break;
            }
        }
    }
    f64::from(hit) / f64::from(releases)
}

/// Table XV, random schedule at 3%: 0.15% within 10^3 calls, 2.4% within 10^4, 23.2% within
/// 10^5 (2,000 releases per cell, 500 for 10^5). Our estimate must lie within three standard
/// errors of the paper's (plus one release, for the rounding of tiny rates).
#[test]
fn monte_carlo_matches_table_xv_three_percent_row() {
    for (calls, releases, paper) in [
        (1_000u32, 2_000u32, 0.0015),
        (10_000, 2_000, 0.024),
        (100_000, 500, 0.232),
    ] {
        let got = suppressed_fraction(0.03, calls, releases, 0x6e72_6d6c + u64::from(calls));
        let se = (paper * (1.0 - paper) / f64::from(releases)).sqrt();
        let tol = 3.0 * se + 1.0 / f64::from(releases);
        eprintln!(
            "3% random, {calls} calls, {releases} releases: {:.2}% (paper {:.2}%)",
            got * 100.0,
            paper * 100.0
        );
        assert!(
            (got - paper).abs() <= tol,
            "{calls} calls: {got} vs paper {paper} ± {tol}"
        );
    }
    // Far below p*, nothing is suppressed (Table XV, 1% row).
    assert_eq!(suppressed_fraction(0.01, 10_000, 500, 7), 0.0);
}
