//! Cache prefetch hints, for serving a batch of announces without waiting on memory
//! once per request.
//!
//! With a million torrents, an announce misses the cache on its torrent's slot and
//! again on the torrent's peers: each miss is a trip to memory, and one request at a
//! time the core waits for every one in turn. A batch that first asks for the memory
//! of all its requests lets the misses overlap. A hint never faults and never changes
//! what a program computes, so a wrong or stale address costs a wasted fetch only.

/// Bytes per cache line on the machines we run on.
const LINE: usize = 64;

/// Asks the core to start fetching the cache lines of `len` bytes at `start` (at most
/// `max_lines` of them) into every cache level.
#[inline(always)]
pub(crate) fn prefetch_bytes(start: *const u8, len: usize, max_lines: usize) {
    let first = start as usize & !(LINE - 1);
    let end = (start as usize).wrapping_add(len);
    let mut line = first;
    let mut lines = 0;
    while line < end && lines < max_lines {
        prefetch_line(line as *const u8);
        line += LINE;
        lines += 1;
    }
}

/// Asks the core to start fetching the cache lines of `value`, at most `max_lines`.
#[inline(always)]
pub(crate) fn prefetch<T>(value: &T, max_lines: usize) {
    prefetch_bytes(std::ptr::from_ref(value).cast(), size_of::<T>(), max_lines);
}

#[inline(always)]
fn prefetch_line(address: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `prefetcht0` needs SSE, which every x86-64 core has, and is a hint:
        // it reads nothing the program sees and never faults, whatever the address.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(address.cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // No stable prefetch intrinsic elsewhere: the batch is served as it comes.
        let _ = address;
    }
}
