//! The event queue: a min-heap on (time, insertion order).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Something that happens to one endpoint (a node: flow `i`'s `a` is node `2i`, its `b` `2i + 1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventKind {
    /// The node's wake-up; stale unless `generation` is still the node's current one.
    Wake { node: u32, generation: u64 },
    /// The packet in `slot` of the packet pool arrives at the node.
    Deliver { node: u32, slot: u32 },
    /// The packet in `slot` reaches the receive side in front of the node, where a GRO-like
    /// batch holds it (only when the link has one; otherwise packets go straight to `Deliver`).
    Arrive { node: u32, slot: u32 },
    /// The node's GRO-like batch `generation` has waited its window: hand it over, unless it
    /// was handed over already (then the event is stale).
    GroFlush { node: u32, generation: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Event {
    /// The time in the high 64 bits, the insertion order in the low 64 bits: one comparison
    /// orders by time, then first in, first out.
    key: u128,
    pub(crate) kind: EventKind,
}

impl Event {
    pub(crate) fn at_us(&self) -> u64 {
        (self.key >> 64) as u64
    }
}

impl Ord for Event {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: `BinaryHeap` is a max-heap and we want the earliest event on top.
        other.key.cmp(&self.key)
    }
}

impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Pending events, earliest first, ties broken by insertion order.
#[derive(Debug, Default)]
pub(crate) struct EventQueue {
    heap: BinaryHeap<Event>,
    inserted: u64,
}

impl EventQueue {
    pub(crate) fn push(&mut self, at_us: u64, kind: EventKind) {
        let key = u128::from(at_us) << 64 | u128::from(self.inserted);
        self.heap.push(Event { key, kind });
        self.inserted += 1;
    }

    /// When the next event happens.
    pub(crate) fn peek_time(&self) -> Option<u64> {
        self.heap.peek().map(Event::at_us)
    }

    pub(crate) fn pop(&mut self) -> Option<Event> {
        self.heap.pop()
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_then_insertion_order() {
        let mut queue = EventQueue::default();
        let wake = |node| EventKind::Wake { node, generation: 0 };
        queue.push(5, wake(0));
        queue.push(3, wake(1));
        queue.push(5, wake(2));
        queue.push(3, wake(3));
        queue.push(4, wake(4));
        let order: Vec<_> = std::iter::from_fn(|| queue.pop())
            .map(|e| match e.kind {
                EventKind::Wake { node, .. } => (e.at_us(), node),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(order, [(3, 1), (3, 3), (4, 4), (5, 0), (5, 2)]);
    }
}
