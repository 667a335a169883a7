use super::*;

fn settings(min: u32, max: u32) -> IntervalSettings {
    IntervalSettings {
        grace: 30,
        ..IntervalSettings::adaptive(min, max)
    }
}

#[test]
fn replies_are_jittered_within_bounds_and_peers_outlive_them() {
    let interval = AnnounceInterval::new(settings(1800, 10800));
    let given: Vec<u32> = (0..10_000u32)
        .map(|i| interval.for_reply(Family::V4, i.wrapping_mul(2_654_435_761)))
        .collect();
    assert!(given.iter().all(|&i| (1620..=1980).contains(&i)));
    assert!(given.iter().any(|&i| i < 1700) && given.iter().any(|&i| i > 1900));
    assert_eq!(interval.min_interval(1800), 900);
    // Peers live past the longest reply of either family, plus the grace.
    interval.set(Family::V6, 3600);
    assert_eq!(interval.peer_timeout(), 3600 + 360 + 30);
    assert_eq!(jittered(5, 10, 7), 5, "no spread below 10 s at 10%");
}

#[test]
fn the_capacity_is_learnt_from_announces_over_busy_time() {
    let mut controller = Controller::new(settings(1800, 10800));
    assert_eq!(controller.capacity(), None);
    let second = LoadSample {
        socket_busy: Some(0.25),
        swarm_busy: 0.1,
        families: [
            FamilySample {
                announces: 20_000,
                served: 40_000,
                lost: 0,
            },
            FamilySample {
                announces: 5_000,
                served: 10_000,
                lost: 0,
            },
        ],
        peers: 1_250_000,
    };
    for _ in 0..600 {
        controller.tick(&second);
    }
    // 25,000 announces at a quarter of its time: 100,000 a second.
    let capacity = controller.capacity().unwrap();
    assert!((capacity - 100_000.0).abs() < 1.0, "{capacity}");
    // 1.25 M peers at 100,000 a second, aiming at 0.7: 17.9 s, so the minimum.
    assert_eq!(controller.tick(&second), [1800, 1800]);
}

#[test]
fn bounds_set_at_runtime_are_checked_and_taken_at_the_next_tick() {
    let interval = AnnounceInterval::new(settings(1800, 10800));
    let mut controller = Controller::new(*interval.settings());
    let bounds = interval.bounds();
    assert_eq!(
        (bounds.min, bounds.max, bounds.adaptive, bounds.fixed),
        (1800, 10800, true, None)
    );
    for wrong in [
        Bounds { min: 0, ..bounds },
        Bounds {
            min: 3600,
            max: 1800,
            ..bounds
        },
        Bounds {
            max: 86_401,
            ..bounds
        },
        Bounds {
            fixed: Some(0),
            ..bounds
        },
    ] {
        assert!(interval.set_bounds(wrong).is_err(), "{wrong:?}");
    }
    assert_eq!(interval.bounds(), bounds, "refused bounds change nothing");
    // Fixed: given at once, whatever the load.
    assert_eq!(
        interval.set_bounds(Bounds {
            fixed: Some(2700),
            ..bounds
        }),
        Ok(true)
    );
    assert_eq!(interval.current(Family::V6), 2700);
    controller.apply(&interval.bounds());
    let mut overloaded = LoadSample::default();
    overloaded.families[0].served = 10;
    overloaded.families[0].lost = 1000;
    assert_eq!(controller.tick(&overloaded), [2700, 2700]);
    // A lower maximum, the load followed again: capped there.
    let capped = Bounds {
        max: 3600,
        fixed: None,
        ..bounds
    };
    assert_eq!(interval.set_bounds(capped), Ok(true));
    assert_eq!(
        interval.set_bounds(capped),
        Ok(false),
        "the same again changes nothing"
    );
    controller.apply(&interval.bounds());
    for _ in 0..5 {
        assert!(
            controller
                .tick(&overloaded)
                .iter()
                .all(|&given| given <= 3600)
        );
    }
}

#[test]
fn a_fixed_interval_stays_put() {
    let mut controller = Controller::new(IntervalSettings {
        adaptive: false,
        ..settings(1800, 10800)
    });
    let mut overloaded = LoadSample::default();
    overloaded.families[0].served = 10;
    overloaded.families[0].lost = 100;
    assert_eq!(controller.tick(&overloaded), [1800, 1800]);
}

/// Clients that obey as libtorrent does, against a tracker whose swarm workers serve
/// `capacity` announces a second and whose socket workers answer four times as many:
/// past the swarm workers' share they answer with the interval and no peers (a backoff
/// reply, nothing stored), past theirs the rest is dropped; one tick a second.
struct Simulation {
    controller: Controller,
    interval: AnnounceInterval,
    capacity: usize,
    /// Clients due at each second ahead, by second (a wheel of `wheel.len()` seconds).
    wheel: Vec<Vec<u32>>,
    fails: Vec<u32>,
    /// When each client's peer expires (0: never stored).
    expires: Vec<usize>,
    grace: usize,
    now: usize,
    random: u64,
}

/// What one second of a simulation saw.
#[derive(Clone, Copy, Debug)]
struct Second {
    offered: usize,
    /// Answered: fully, or with a backoff reply.
    served: usize,
    interval: u32,
}

impl Simulation {
    /// `clients` spread evenly over one base interval, as a population at rest is.
    fn new(settings: IntervalSettings, capacity: usize, clients: usize) -> Self {
        let wheel_len = settings.max as usize * 2 + 4000;
        let mut wheel = vec![Vec::new(); wheel_len];
        for client in 0..clients {
            wheel[client * settings.min as usize / clients].push(client as u32);
        }
        Self {
            controller: Controller::new(settings),
            interval: AnnounceInterval::new(settings),
            capacity,
            wheel,
            fails: vec![0; clients],
            expires: vec![0; clients],
            grace: settings.grace as usize,
            now: 0,
            random: 0x9e37_79b9_7f4a_7c15,
        }
    }

    fn next_random(&mut self) -> u32 {
        // xorshift64*
        self.random ^= self.random >> 12;
        self.random ^= self.random << 25;
        self.random ^= self.random >> 27;
        (self.random.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    }

    fn schedule(&mut self, client: u32, after: usize) {
        let slot = (self.now + after.max(1)) % self.wheel.len();
        self.wheel[slot].push(client);
    }

    fn second(&mut self) -> Second {
        let slot = self.now % self.wheel.len();
        let due = std::mem::take(&mut self.wheel[slot]);
        let offered = due.len();
        let full = offered.min(self.capacity);
        let served = offered.min(4 * self.capacity);
        for (i, &client) in due.iter().enumerate() {
            if i < served {
                let random = self.next_random();
                let given = if i < full {
                    self.interval.for_reply(Family::V4, random)
                } else {
                    self.interval.for_backoff(Family::V4, random)
                };
                self.fails[client as usize] = 0;
                if i < full {
                    self.expires[client as usize] = self.now + given as usize + self.grace;
                }
                self.schedule(client, given as usize);
            } else {
                // No answer: libtorrent gives up on a UDP tracker after 15 s, then
                // waits 5 + 12.5 × fails² seconds (at most an hour).
                let fails = &mut self.fails[client as usize];
                *fails += 1;
                let backoff = (5 + 25 * u64::from(*fails) * u64::from(*fails) / 2).min(3600);
                self.schedule(client, 15 + backoff as usize);
            }
        }
        let now = self.now;
        let peers = self.expires.iter().filter(|&&at| at > now).count();
        let mut sample = LoadSample {
            socket_busy: Some(served as f64 / (4 * self.capacity) as f64),
            swarm_busy: full as f64 / self.capacity as f64,
            peers: peers as u64,
            ..LoadSample::default()
        };
        // Backoff replies are answers, but demand the swarm workers could not take.
        sample.families[0] = FamilySample {
            announces: full as u64,
            served: full as u64,
            lost: (offered - full) as u64,
        };
        let [given, _] = self.controller.tick(&sample);
        self.interval.set(Family::V4, given);
        self.now += 1;
        Second {
            offered,
            served,
            interval: given,
        }
    }

    fn run(&mut self, seconds: usize) -> Vec<Second> {
        (0..seconds).map(|_| self.second()).collect()
    }
}

/// The share of offered announces served over `seconds`.
fn served_share(seconds: &[Second]) -> f64 {
    let offered: usize = seconds.iter().map(|s| s.offered).sum();
    let served: usize = seconds.iter().map(|s| s.served).sum();
    served as f64 / offered.max(1) as f64
}

/// Base interval 60 s (a scaled 30 minutes), bounds 60 to 360 s (6 × base, as 30
/// minutes to 3 hours), a tracker serving 100 announces a second.
const BASE: u32 = 60;

fn scaled() -> IntervalSettings {
    settings(BASE, 6 * BASE)
}

#[test]
fn at_rest_the_interval_stays_at_its_minimum() {
    // Offered 0.5 of capacity: under the target load, nothing moves.
    let mut simulation = Simulation::new(scaled(), 100, 50 * BASE as usize);
    let seconds = simulation.run(10 * BASE as usize);
    assert!(
        seconds.iter().all(|s| s.interval == BASE),
        "{:?}",
        &seconds[..10]
    );
    assert_eq!(served_share(&seconds), 1.0);
}

/// Runs `clients` against capacity 100 for 24 base intervals; returns the seconds.
fn surge(clients: usize) -> Vec<Second> {
    let mut simulation = Simulation::new(scaled(), 100, clients);
    simulation.run(24 * BASE as usize)
}

fn report(seconds: &[Second]) -> String {
    seconds
        .chunks(BASE as usize)
        .map(|chunk| {
            format!(
                "{:.3}@{}",
                served_share(chunk),
                chunk.last().map_or(0, |s| s.interval)
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn twice_the_capacity_is_served_after_two_base_intervals_without_oscillation() {
    let seconds = surge(2 * 100 * BASE as usize);
    eprintln!(
        "2x, per base interval, answered share @ interval: {}",
        report(&seconds)
    );
    let base = BASE as usize;
    let after = &seconds[2 * base..];
    assert!(served_share(after) >= 0.99, "{}", report(&seconds));
    // No oscillation: once up, the interval only falls (an overshoot from the
    // retries of the clients dropped early) or stays.
    let peak = seconds
        .iter()
        .enumerate()
        .max_by_key(|(_, s)| s.interval)
        .map_or(0, |(at, _)| at);
    assert!(
        seconds[peak..]
            .windows(2)
            .all(|pair| pair[1].interval <= pair[0].interval),
        "{}",
        report(&seconds)
    );
    // Ends near what the load needs: 2 / 0.7 = 2.9 base intervals.
    let last = f64::from(seconds.last().unwrap().interval) / f64::from(BASE);
    assert!((2.6..=3.2).contains(&last), "{}", report(&seconds));
}

#[test]
fn five_times_the_capacity_is_served_after_two_base_intervals() {
    let seconds = surge(5 * 100 * BASE as usize);
    eprintln!(
        "5x, per base interval, answered share @ interval: {}",
        report(&seconds)
    );
    let after = &seconds[2 * BASE as usize..];
    assert!(served_share(after) >= 0.95, "{}", report(&seconds));
}

#[test]
fn the_interval_comes_back_down_when_the_surge_ends() {
    let base = BASE as usize;
    let mut simulation = Simulation::new(scaled(), 100, 2 * 100 * base);
    let surge = simulation.run(4 * base);
    assert!(surge.last().unwrap().interval > 2 * BASE);
    // Most clients leave: the ones due are dropped from the wheel for good.
    for slot in &mut simulation.wheel {
        slot.truncate(slot.len() / 5);
    }
    let after = simulation.run(20 * base);
    let back = after
        .iter()
        .position(|s| s.interval <= BASE + BASE / 10)
        .unwrap_or(usize::MAX);
    assert!(back < 12 * base, "{}", report(&after));
    assert_eq!(served_share(&after), 1.0, "{}", report(&after));
}
