//! The announce interval, adapted to load (`[interval]`).
//!
//! A tracker's load is set by the interval it gives: P peers told to come back every I
//! seconds send P/I announces a second. Past its capacity a tracker that drops requests
//! makes clients retry sooner (libtorrent after 17 s, then 55 s, ...), which adds to
//! the load; telling them to come back later is the lever clients obey. It acts with a
//! dead time: a client told I now comes back at now + I, and the clients arriving now
//! were told their interval one interval ago.
//!
//! The [`Controller`], ticked once a second per IP family:
//!
//! 1. **Load** ℓ: the share of the tracker's capacity the tick used (the busiest
//!    socket worker, the busiest swarm worker, the fullest swarm queue) and, when
//!    requests were lost, the announces offered (answered and lost) over the capacity
//!    learnt. Lost are the requests shed and, of the datagrams the kernel dropped, the
//!    share that was demand in what the same worker read around them, weighed at each
//!    queue check ([`DropWeigher`]: a flood of junk is little demand, however much the
//!    kernel drops, and drops among mostly junk none); the capacity is learnt only
//!    from seconds whose busiest socket worker read mostly demand.
//! 2. **Demand** D = ℓ × Ĩ, where Ĩ is the interval the clients arriving now were
//!    given: found in the controller's own history, the tick s with s + I(s) = now. For
//!    one population D does not depend on the interval (load falls as the interval
//!    rises): it is the interval at which the load would be 1. Ticks no client was told
//!    to come back at (after the interval rose, the old clients are back before the
//!    new ones) tell nothing and are skipped. D is smoothed over [`SMOOTHING`] ticks.
//! 3. **Target** I* = D / `target_load`, within [`min`, `max`].
//! 4. **Moves**: up at most twofold per 1/30 of the base interval (a minute at 1,800
//!    s: a longer interval only makes clients come back later, and only an interval
//!    from now, so a faster rise gains nothing and would let a burst move it far);
//!    down with a slope a ≤ 1 − ℓ/`target_load` (and ≤ [`MAX_DOWN_SLOPE`]): clients told
//!    a shorter interval arrive together with those told a longer one before them, so
//!    arrivals grow by 1/(1 − a) while it lasts, which the headroom left covers.
//!
//! Each reply adds jitter (± `jitter_percent`), so clients that announce in lockstep
//! (libtorrent announces the torrents sharing a tracker together) spread out. Peers live
//! as long as the interval they were given plus the configured grace
//! (`cleaning.peer_timeout` − `announce_interval`), so a longer interval never makes
//! peers expire before they come back.
//!
//! One interval for every swarm: a client in a small swarm gains the most from an
//! announce (each new peer matters there), one in a large swarm the least (it knows
//! enough peers, and finds more through PEX and the DHT), so if anything large swarms
//! should wait longer; but swarm sizes are skewed (a few large swarms hold most peers),
//! so sparing the small ones would barely change the load. Not done: see
//! documents/overload.md.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

mod driver;
mod drops;

pub use driver::{FamilyCounts, IntervalGauges, LoadCounters, TICK, spawn_controller};
pub use drops::DropWeigher;

/// Ticks over which the demand is smoothed (an exponential average).
pub(crate) const SMOOTHING: f64 = 10.0;
/// The fastest the interval falls: half a second per second.
pub(crate) const MAX_DOWN_SLOPE: f64 = 0.5;

/// An IP family's index in per-family arrays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    V4 = 0,
    V6 = 1,
}

impl Family {
    /// Both, in index order.
    pub const ALL: [Family; 2] = [Family::V4, Family::V6];

    /// The family's `ip_version` label in metrics.
    pub fn label(self) -> &'static str {
        match self {
            Family::V4 => "4",
            Family::V6 => "6",
        }
    }
}

/// The bounds and aims of the adaptive interval, in seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IntervalSettings {
    /// Whether the interval adapts; when not, it stays at `min`.
    pub adaptive: bool,
    /// The interval at no load: the protocol's `announce_interval`.
    pub min: u32,
    /// The longest interval given.
    pub max: u32,
    /// The share of its capacity the tracker aims to use (0.1 to 0.95).
    pub target_load: f64,
    /// Each reply's interval is moved by up to this share either way, at random.
    pub jitter_percent: u32,
    /// How long a peer outlives the interval it was given.
    pub grace: u32,
    /// HTTP's `min interval` as a share of the interval (the configured
    /// `min_announce_interval` / `announce_interval`).
    pub min_share: f64,
    /// The longest interval the transport allows (WebTorrent's idle timeout, jitter
    /// taken off); `u32::MAX` where there is no such limit.
    pub ceiling: u32,
}

/// The bounds an operator can change while the tracker runs (the admin API's
/// `PUT /v1/interval/<tracker>`); not kept across a restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// The shortest interval given, at rest.
    pub min: u32,
    /// The longest.
    pub max: u32,
    /// Whether the interval follows the load.
    pub adaptive: bool,
    /// An interval given whatever the load, while set.
    pub fixed: Option<u32>,
}

/// The longest interval an operator may set, in seconds (a day).
pub const LONGEST_BOUND: u32 = 86_400;

impl IntervalSettings {
    /// Adaptive between `min` and `max` with the defaults of `[interval]` (70% of
    /// capacity, 10% jitter), the grace a peer timeout of twice `min` leaves, and no
    /// ceiling: a tracker's are made by [`AnnounceInterval::settings_for`].
    pub fn adaptive(min: u32, max: u32) -> Self {
        Self {
            adaptive: true,
            min,
            max,
            target_load: 0.7,
            jitter_percent: 10,
            grace: min - min / 10,
            min_share: 0.5,
            ceiling: u32::MAX,
        }
    }
}

/// The interval the socket and swarm workers give now, per family: set by the
/// [`Controller`]'s thread, read with one relaxed load per reply.
#[derive(Debug)]
pub struct AnnounceInterval {
    seconds: [AtomicU32; 2],
    settings: IntervalSettings,
    bounds: std::sync::Mutex<Bounds>,
    /// `bounds.min` and `bounds.max`, read without the lock by every reply: whatever
    /// the jitter or the backoff, a reply's interval stays within them.
    shortest: AtomicU32,
    longest: AtomicU32,
    gauges: IntervalGauges,
}

impl AnnounceInterval {
    /// At `settings.min` for both families.
    pub fn new(settings: IntervalSettings) -> Self {
        Self {
            seconds: [AtomicU32::new(settings.min), AtomicU32::new(settings.min)],
            settings,
            bounds: std::sync::Mutex::new(Bounds {
                min: settings.min,
                max: settings.max,
                adaptive: settings.adaptive,
                fixed: None,
            }),
            shortest: AtomicU32::new(settings.min),
            longest: AtomicU32::new(settings.max),
            gauges: IntervalGauges::default(),
        }
    }

    /// The bounds in force, `(shortest, longest)`, never under 1.
    fn limits(&self) -> (u64, u64) {
        let longest = self.longest.load(Relaxed).max(1);
        let shortest = self.shortest.load(Relaxed).clamp(1, longest);
        (u64::from(shortest), u64::from(longest))
    }

    /// `seconds` within the bounds in force.
    fn bounded(&self, seconds: u64) -> u32 {
        let (shortest, longest) = self.limits();
        seconds.clamp(shortest, longest) as u32
    }

    /// `interval` moved by `random` within ± `jitter_percent`, spread evenly over the
    /// part of that range inside the bounds (clamping would give half the replies at
    /// rest the same interval, and keep clients that announce in lockstep together).
    fn jittered(&self, interval: u32, random: u32) -> u32 {
        let (shortest, longest) = self.limits();
        let interval = u64::from(interval).clamp(shortest, longest);
        let spread = interval * u64::from(self.settings.jitter_percent.min(50)) / 100;
        let low = interval.saturating_sub(spread).max(shortest);
        let high = (interval + spread).min(longest);
        (low + u64::from(random) % (high - low + 1)) as u32
    }

    /// The interval for a client the tracker is too full to take (a new torrent, or
    /// a new peer not stored): the longest it gives, jittered, so it does not come
    /// back before there may be room.
    pub fn for_full(&self, random: u32) -> u32 {
        self.jittered(self.longest.load(Relaxed), random)
    }

    /// The bounds in force.
    pub fn bounds(&self) -> Bounds {
        *self.bounds.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces the bounds (the controller takes them at its next tick, within a
    /// second; replies are held within them at once); an interval given fixed is
    /// given at once. Refused, with the reason, unless 1 ≤ min ≤ max ≤ a day (and
    /// under the transport's ceiling) and a fixed interval between min and max.
    /// Returns whether anything changed.
    pub fn set_bounds(&self, bounds: Bounds) -> Result<bool, String> {
        let ceiling = self.settings.ceiling.min(LONGEST_BOUND);
        if bounds.min < 1 || bounds.min > bounds.max || bounds.max > ceiling {
            return Err(format!(
                "min and max must satisfy 1 <= min <= max <= {ceiling} seconds"
            ));
        }
        if bounds
            .fixed
            .is_some_and(|fixed| !(bounds.min..=bounds.max).contains(&fixed))
        {
            return Err(format!(
                "fixed must be between min and max ({} to {} seconds)",
                bounds.min, bounds.max
            ));
        }
        let mut current = self.bounds.lock().unwrap_or_else(|e| e.into_inner());
        let changed = *current != bounds;
        *current = bounds;
        // Widened before narrowed, so that a reply read between the two stores is
        // within the old bounds or the new.
        self.shortest
            .store(bounds.min.min(self.shortest.load(Relaxed)), Relaxed);
        self.longest.store(bounds.max, Relaxed);
        self.shortest.store(bounds.min, Relaxed);
        for family in Family::ALL {
            let now = u64::from(self.current(family));
            self.seconds[family as usize].store(self.bounded(now), Relaxed);
        }
        drop(current);
        if let Some(fixed) = bounds.fixed {
            for family in Family::ALL {
                self.set(family, fixed);
            }
        }
        Ok(changed)
    }

    /// The settings of a tracker configured with `config`: its protocol's
    /// `announce_interval` the shortest, `min_interval` HTTP's `min interval`, and
    /// `ceiling` the longest interval the transport allows (WebTorrent connections
    /// that stay quiet longer are closed).
    pub fn settings_for<K: shoal_common::TrackerKind>(
        config: &shoal_common::Config<K>,
        min_interval: u32,
        ceiling: u32,
    ) -> IntervalSettings {
        let base = K::announce_interval(&config.protocol).max(1);
        let jitter = config.interval.jitter_percent;
        // The longest reply, jitter included, stays under the ceiling.
        let ceiling = (u64::from(ceiling) * 100 / (100 + u64::from(jitter))) as u32;
        IntervalSettings {
            adaptive: config.interval.adaptive,
            min: base,
            max: config.interval.max_for(base).min(ceiling).max(base),
            target_load: f64::from(config.interval.target_load_percent) / 100.0,
            jitter_percent: jitter,
            // At rest a peer lives `cleaning.peer_timeout`, its longest reply included.
            grace: config
                .cleaning
                .peer_timeout
                .saturating_sub(base)
                .saturating_sub(base * jitter.min(50) / 100),
            min_share: f64::from(min_interval.min(base)) / f64::from(base),
            ceiling: ceiling.max(base),
        }
    }

    /// What the controller saw last.
    pub fn gauges(&self) -> &IntervalGauges {
        &self.gauges
    }

    /// The settings it was made with.
    pub fn settings(&self) -> &IntervalSettings {
        &self.settings
    }

    /// The interval now, before jitter.
    pub fn current(&self, family: Family) -> u32 {
        self.seconds[family as usize].load(Relaxed)
    }

    /// Sets the interval of `family` (the controller, a runtime override), held
    /// within the bounds in force.
    pub fn set(&self, family: Family, seconds: u32) {
        self.seconds[family as usize].store(self.bounded(u64::from(seconds)), Relaxed);
    }

    /// The interval for one reply: the current one moved by `random` (any 32 bits)
    /// within ± `jitter_percent`, and within the bounds (at the shortest interval the
    /// jitter only lengthens it, at the longest only shortens it).
    pub fn for_reply(&self, family: Family, random: u32) -> u32 {
        self.jittered(self.current(family), random)
    }

    /// The interval for a backoff reply (the request was shed: answered without being
    /// stored): spread over one to two current intervals, so that clients answered
    /// faster than the swarm workers can serve come back no faster than they can.
    pub fn for_backoff(&self, family: Family, random: u32) -> u32 {
        let interval = u64::from(self.current(family));
        self.bounded(interval + u64::from(random) % (interval + 1))
    }

    /// HTTP's `min interval` to go with `interval`.
    pub fn min_interval(&self, interval: u32) -> u32 {
        ((f64::from(interval) * self.settings.min_share) as u32).clamp(1, interval.max(1))
    }

    /// How long a peer that announces now lives: the longest interval a reply that
    /// stores it can carry now (either family, jitter included) plus the grace.
    pub fn peer_timeout(&self) -> u32 {
        let longest = Family::ALL
            .iter()
            .map(|&family| self.current(family))
            .max()
            .unwrap_or(self.settings.min);
        let jitter = u64::from(longest) * u64::from(self.settings.jitter_percent) / 100;
        (u64::from(longest) + jitter + u64::from(self.settings.grace)).min(u64::from(u32::MAX))
            as u32
    }
}

/// What one second measured of one IP family.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FamilySample {
    /// Announces answered.
    pub announces: u64,
    /// Requests of every kind answered (announces, scrapes, connects).
    pub served: u64,
    /// Requests lost: shed (a swarm queue was full), and the share of the datagrams
    /// the kernel dropped (the receive queue was full) that was demand
    /// (`driver::demand_lost`).
    pub lost: f64,
}

impl FamilySample {
    /// [`lost`](Self::lost) as a count: not negative, finite.
    fn lost_count(&self) -> f64 {
        if self.lost.is_finite() && self.lost > 0.0 {
            // No more than a counter holds: sums stay finite.
            self.lost.min(u64::MAX as f64)
        } else {
            0.0
        }
    }
}

/// What one second measured of the tracker.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LoadSample {
    /// The busiest socket worker's share of the second spent working (0 to 1);
    /// `None` where the transport does not measure it.
    pub socket_busy: Option<f64>,
    /// The busiest swarm worker's share of the second spent working.
    pub swarm_busy: f64,
    /// Peers stored, at the end of the second: the clients that announce once per
    /// interval.
    pub peers: u64,
    /// Of what the busiest socket worker read, the share that was demand (announces,
    /// requests shed): low when it is busy with junk. `None` where not counted.
    pub socket_demand_share: Option<f64>,
    /// Per family, in [`Family`] order.
    pub families: [FamilySample; 2],
}

impl LoadSample {
    /// The share of the tracker's capacity the second used: its busiest worker's.
    pub fn busy(&self) -> f64 {
        // `max` passes over a NaN; a share that is no number at all counts as none.
        let busy = self.socket_busy.unwrap_or(0.0).max(self.swarm_busy);
        if busy.is_finite() {
            busy.clamp(0.0, 1.0)
        } else {
            0.0
        }
    }

    /// The load to show: the busy share, or offered over served when requests were
    /// lost (above 1).
    pub fn busy_or_load(&self) -> f64 {
        let lost = self.lost();
        let served = self.total(|family| family.served);
        if lost <= 0.0 {
            return self.busy();
        }
        self.busy().max(1.0) * (served as f64 + lost) / served.max(1) as f64
    }

    /// Requests lost, both families: a count, never negative or NaN.
    fn lost(&self) -> f64 {
        self.families.iter().map(|family| family.lost_count()).sum()
    }

    /// Whether the busiest socket worker's reading was mostly demand: seconds it
    /// spent on junk teach nothing of the capacity, and say nothing of the demand.
    fn mostly_demand(&self) -> bool {
        self.socket_demand_share
            .is_none_or(|share| share.is_nan() || share >= MIN_DEMAND_SHARE)
    }

    fn total(&self, field: impl Fn(&FamilySample) -> u64) -> u64 {
        self.families.iter().map(field).fold(0, u64::saturating_add)
    }
}

/// Busy shares under this teach nothing of the capacity (fixed costs dominate).
const MIN_BUSY_TO_LEARN: f64 = 0.02;
/// Seconds that teach the capacity, over which its estimate is averaged.
const CAPACITY_WINDOW: f64 = 60.0;
/// Of what the busiest socket worker read, the share of demand under which it is
/// taken as busy with junk (honest UDP traffic is about half announces: a connect
/// before each, some scrapes).
const MIN_DEMAND_SHARE: f64 = 0.2;
/// The interval rises at most twofold in this share of the base interval: a minute
/// at 1,800 s. Its effect only shows an interval later (the clients arriving now were
/// told before), so a faster rise gains nothing, and a burst of losses (or of a flood
/// that passes for them) moves it little: 5 s of losses, 6% at most.
const DOUBLING_SHARE_OF_BASE: f64 = 1.0 / 30.0;

/// The adaptive interval of both families (see the module's notes); no clock, no
/// I/O: [`tick`](Self::tick) once a second with what the second measured.
#[derive(Debug)]
pub struct Controller {
    settings: IntervalSettings,
    /// Announces per second and busy share, averaged: their ratio is the capacity.
    announces_rate: f64,
    busy_rate: f64,
    families: [FamilyState; 2],
    /// An interval an operator fixed, given whatever the load.
    fixed: Option<u32>,
}

/// One family's interval and history.
#[derive(Debug)]
struct FamilyState {
    /// The interval given now, in seconds (fractional while it falls).
    current: f64,
    /// The smoothed demand, in seconds: the interval at which the load would be 1.
    demand: Option<f64>,
    /// Seconds since requests were last lost. The interval falls only once a whole
    /// interval has passed since: the clients answered meanwhile (some with a reply
    /// that stored nothing) are then back, and counted among the peers.
    since_loss: u32,
    /// The interval given in each of the last seconds, newest last, as many as the
    /// longest interval.
    history: VecDeque<u32>,
}

impl Controller {
    /// At the shortest interval, with no history.
    pub fn new(settings: IntervalSettings) -> Self {
        let family = || FamilyState {
            current: f64::from(settings.min),
            demand: None,
            since_loss: u32::MAX,
            history: VecDeque::new(),
        };
        Self {
            settings,
            announces_rate: 0.0,
            busy_rate: 0.0,
            families: [family(), family()],
            fixed: None,
        }
    }

    /// Takes the bounds an operator set ([`AnnounceInterval::set_bounds`]); the
    /// intervals move into them at once.
    pub fn apply(&mut self, bounds: &Bounds) {
        let max = bounds.max.max(1);
        self.settings.min = bounds.min.clamp(1, max);
        self.settings.max = max;
        self.settings.adaptive = bounds.adaptive;
        self.fixed = bounds
            .fixed
            .map(|fixed| fixed.clamp(self.settings.min, max));
        for state in &mut self.families {
            state.current = state
                .current
                .clamp(f64::from(self.settings.min), f64::from(max));
        }
    }

    /// Announces a second the tracker would answer fully busy, as learnt so far:
    /// `None` until seconds with announces and busy time taught it (a second busy
    /// with no announce, a start restoring peers, teaches nothing), never zero, never
    /// infinite or NaN.
    pub fn capacity(&self) -> Option<f64> {
        let capacity = self.announces_rate / self.busy_rate;
        (self.busy_rate > 0.0 && capacity.is_finite() && capacity >= 1.0).then_some(capacity)
    }

    /// The intervals to give from now on, per family, after a second that measured
    /// `sample`.
    pub fn tick(&mut self, sample: &LoadSample) -> [u32; 2] {
        let settings = self.settings;
        if let Some(fixed) = self.fixed {
            return [fixed; 2];
        }
        if !settings.adaptive {
            for state in &mut self.families {
                state.current = f64::from(settings.min);
            }
            return [settings.min; 2];
        }
        let busy = sample.busy();
        let announces = sample.total(|family| family.announces) as f64;
        // Only seconds that did work and answered announces teach the capacity: the
        // ratio of announces to busy time over them. (Averaged over every second, a
        // second of busy time and no announce made it 0, and the demand infinite.)
        // Nor do seconds whose busiest socket worker read mostly junk: its busy time
        // bought no announces (120k junk datagrams a second took it 157x lower).
        if busy >= MIN_BUSY_TO_LEARN && announces >= 1.0 && sample.mostly_demand() {
            self.announces_rate += (announces - self.announces_rate) / CAPACITY_WINDOW;
            self.busy_rate += (busy - self.busy_rate) / CAPACITY_WINDOW;
        }
        let capacity = self.capacity();
        let peers = sample.peers as f64;
        let mut given = [settings.min; 2];
        for family in Family::ALL {
            let measured = sample.families[family as usize];
            let state = &mut self.families[family as usize];
            // The population's demand: every peer announces once an interval, so at
            // interval I the load is peers / (I × capacity).
            let mut now = capacity.map(|capacity| peers / capacity);
            state.since_loss = state.since_loss.saturating_add(1);
            let lost = measured.lost_count();
            if lost > 0.0 {
                state.since_loss = 0;
                // Losing requests: the peers stored are only those answered. The
                // arrivals tell the rest: they come at the pace of the announces
                // offered (answered and lost) times the interval they were given:
                // over the capacity learnt (junk adds nothing there, only the demand
                // share of the kernel's drops counts), or offered over served before
                // it is. A second whose busiest socket worker read mostly junk says
                // nothing of the demand: the honest clients it made lose announces
                // retry, and counting their retries would raise the interval for
                // everyone, which does not stop a flood.
                let pace = if !sample.mostly_demand() {
                    None
                } else if let Some(capacity) = capacity {
                    Some((measured.announces as f64 + lost) / capacity)
                } else {
                    let offered = measured.served as f64 + lost;
                    Some(busy.max(1.0) * offered / measured.served.max(1) as f64)
                };
                let from_arrivals = pace.and_then(|pace| {
                    state
                        .arrivals(settings.min)
                        .map(|(told, cohorts)| pace * f64::from(told) / f64::from(cohorts))
                });
                now = match (now, from_arrivals) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
            }
            // A demand is a number of seconds: finite, not negative.
            if let Some(now) = now.filter(|now| now.is_finite() && *now >= 0.0) {
                state.demand = Some(match state.demand {
                    Some(before) => before + (now - before) / SMOOTHING,
                    None => now,
                });
            }
            given[family as usize] = state.step(&settings, busy);
        }
        given
    }
}

impl FamilyState {
    /// Moves the interval toward the demand's: up at once, down no faster than the
    /// headroom allows; records and returns the interval given.
    fn step(&mut self, settings: &IntervalSettings, busy: f64) -> u32 {
        let (min, max) = (f64::from(settings.min), f64::from(settings.max));
        if let Some(demand) = self.demand {
            let target = (demand / settings.target_load).clamp(min, max);
            if target >= self.current {
                let doubling = (min * DOUBLING_SHARE_OF_BASE).max(1.0);
                self.current = target.min(self.current * 2f64.powf(1.0 / doubling));
            } else if self.since_loss > self.current as u32 {
                let slope = (1.0 - busy / settings.target_load).clamp(0.0, MAX_DOWN_SLOPE);
                self.current = (self.current - slope).max(target);
            }
        }
        // Whatever came before (bounds changed, a target of the old bounds), the
        // interval is within the bounds.
        if !self.current.is_finite() {
            self.current = min;
        }
        self.current = self.current.clamp(min, max);
        let given = self.current.round() as u32;
        self.history.push_back(given);
        while self.history.len() > settings.max as usize + 1 {
            self.history.pop_front();
        }
        given
    }

    /// The interval the clients arriving in the second being closed were given, and
    /// how many seconds' clients come back in it: those of the seconds whose interval
    /// brings them back now (two or more while the interval falls). Before any
    /// second's clients can be back, those arriving were told before the controller
    /// started: the shortest interval, `min`. `None` when no second's clients come
    /// back now (the interval rose: they come back later).
    fn arrivals(&self, min: u32) -> Option<(u32, u32)> {
        // Seconds are numbered from the oldest kept; the one being closed is `now`,
        // and second `at`'s clients come back at `at + interval`.
        let now = self.history.len();
        let mut found = None;
        let mut cohorts = 0;
        for (at, &interval) in self.history.iter().enumerate() {
            if at + interval as usize == now {
                found = Some(interval);
                cohorts += 1;
            }
        }
        match found {
            Some(interval) => Some((interval, cohorts)),
            None if now < min as usize => Some((min, 1)),
            None => None,
        }
    }
}

#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests;
