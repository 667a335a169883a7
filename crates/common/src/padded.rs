//! Values kept on cache lines of their own, so workers that write neighbouring values
//! do not slow each other down (false sharing).

/// Aligns a value to its own cache lines (128 bytes covers adjacent-line prefetch).
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct CachePadded<T>(pub(crate) T);

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}
