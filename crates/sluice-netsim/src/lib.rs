//! A deterministic, seeded, event-driven simulated network with a virtual clock.
//!
//! CONTRACT STUB: helper 3 builds the network; the `Endpoint` trait is fixed.

/// Anything the simulator can attach to a network node: a `sluice-proto` sender or receiver
/// behind a small adapter, or a test endpoint. All times are virtual microseconds.
pub trait Endpoint {
    /// A datagram arrived at `now_us`. The buffer may be modified (decrypted in place).
    fn handle_datagram(&mut self, now_us: u64, datagram: &mut [u8]);
    /// Timers due at or before `now_us` fire.
    fn handle_timeout(&mut self, now_us: u64);
    /// The next datagram to send at `now_us`, written into `buf`; its length, or `None` when
    /// nothing is ready now (ask `poll_timeout` when to try again).
    fn poll_transmit(&mut self, now_us: u64, buf: &mut [u8]) -> Option<usize>;
    /// The earliest time at which `handle_timeout` or `poll_transmit` has something to do.
    fn poll_timeout(&self) -> Option<u64>;
    /// Whether this endpoint has finished its work (the simulation may stop when all have).
    fn is_done(&self) -> bool;
}
