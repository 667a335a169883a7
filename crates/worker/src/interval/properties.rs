//! The controller over arbitrary seconds: no announces, busy shares out of range or
//! not numbers, huge and zero counts, restored peers, losses, bounds changed through
//! the API between ticks. Whatever comes, the intervals given and every reply stay
//! within the bounds in force, and nothing it keeps becomes infinite or NaN.

use proptest::prelude::*;

use super::*;

/// A share of a second: usually within 0 to 1, sometimes out of range or no number.
fn share() -> impl Strategy<Value = f64> {
    prop_oneof![
        8 => 0.0..=1.0f64,
        1 => -1.0..3.0f64,
        1 => prop_oneof![Just(f64::NAN), Just(f64::INFINITY), Just(0.0), Just(1.0)],
    ]
}

fn count() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => Just(0u64),
        3 => 0u64..1_000,
        2 => 0u64..10_000_000,
        1 => Just(u64::MAX),
    ]
}

/// A count of lost requests, weighed: usually whole, sometimes a fraction, out of
/// range or no number.
fn lost() -> impl Strategy<Value = f64> {
    prop_oneof![
        6 => count().prop_map(|count| count as f64),
        2 => 0.0..1e7f64,
        1 => prop_oneof![Just(f64::NAN), Just(f64::INFINITY), Just(-1.0), Just(f64::MAX)],
    ]
}

fn family() -> impl Strategy<Value = FamilySample> {
    (count(), count(), lost()).prop_map(|(announces, served, lost)| FamilySample {
        announces,
        served,
        lost,
    })
}

fn sample() -> impl Strategy<Value = LoadSample> {
    (
        proptest::option::of(share()),
        share(),
        count(),
        proptest::option::of(share()),
        family(),
        family(),
    )
        .prop_map(
            |(socket_busy, swarm_busy, peers, socket_demand_share, v4, v6)| LoadSample {
                socket_busy,
                swarm_busy,
                peers,
                socket_demand_share,
                families: [v4, v6],
            },
        )
}

/// Bounds an operator may set (as `set_bounds` accepts them).
fn bounds() -> impl Strategy<Value = Bounds> {
    (
        1u32..20_000,
        0u32..20_000,
        any::<bool>(),
        any::<Option<u32>>(),
    )
        .prop_map(|(min, above, adaptive, fixed)| {
            let max = (min + above).min(LONGEST_BOUND);
            let min = min.min(max);
            Bounds {
                min,
                max,
                adaptive,
                fixed: fixed.map(|fixed| min + fixed % (max - min + 1)),
            }
        })
}

/// A tick, or a change of bounds before it.
#[derive(Clone, Debug)]
enum Step {
    Tick(LoadSample),
    Bounds(Bounds),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(
        prop_oneof![
            9 => sample().prop_map(Step::Tick),
            1 => bounds().prop_map(Step::Bounds),
        ],
        1..300,
    )
}

proptest! {
    #[test]
    fn intervals_and_replies_stay_within_the_bounds_whatever_the_seconds(
        steps in steps(),
        min in 1u32..4000,
        above in 0u32..20_000,
        randoms in proptest::collection::vec(any::<u32>(), 8),
    ) {
        let settings = IntervalSettings::adaptive(min, min + above);
        let interval = AnnounceInterval::new(settings);
        let mut controller = Controller::new(settings);
        for step in steps {
            match step {
                Step::Bounds(bounds) => {
                    prop_assert_eq!(interval.set_bounds(bounds).is_ok(), bounds.max <= settings.ceiling);
                }
                Step::Tick(sample) => {
                    controller.apply(&interval.bounds());
                    let given = controller.tick(&sample);
                    let bounds = interval.bounds();
                    for (family, seconds) in Family::ALL.into_iter().zip(given) {
                        prop_assert!(
                            (bounds.min..=bounds.max).contains(&seconds),
                            "{seconds} outside {bounds:?}"
                        );
                        interval.set(family, seconds);
                    }
                    if let Some(capacity) = controller.capacity() {
                        prop_assert!(capacity.is_finite() && capacity >= 1.0, "{capacity}");
                    }
                    for state in &controller.families {
                        prop_assert!(state.current.is_finite());
                        if let Some(demand) = state.demand {
                            prop_assert!(demand.is_finite() && demand >= 0.0, "{demand}");
                        }
                    }
                    let load = sample.busy_or_load();
                    prop_assert!(load.is_finite() && load >= 0.0, "{load}");
                }
            }
            // Every reply, whatever its kind, within the bounds in force.
            let bounds = interval.bounds();
            for &random in &randoms {
                for family in Family::ALL {
                    for reply in [
                        interval.for_reply(family, random),
                        interval.for_backoff(family, random),
                        interval.for_full(random),
                    ] {
                        prop_assert!(
                            (bounds.min..=bounds.max).contains(&reply),
                            "{reply} outside {bounds:?}"
                        );
                    }
                    let min_interval = interval.min_interval(interval.for_reply(family, random));
                    prop_assert!(min_interval >= 1);
                }
            }
        }
    }
}
