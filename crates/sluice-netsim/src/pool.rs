//! Owned copies of datagrams in flight, in reusable slots: after warm-up no packet allocates.

/// A slab of packet buffers. A freed slot keeps its buffer (and its capacity) for the next packet.
/// It grows to the largest number of packets ever in flight at once.
#[derive(Debug, Default)]
pub(crate) struct PacketPool {
    slots: Vec<Vec<u8>>,
    free: Vec<u32>,
}

impl PacketPool {
    /// A slot holding a copy of `datagram`.
    pub(crate) fn insert(&mut self, datagram: &[u8]) -> u32 {
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                let slot =
                    u32::try_from(self.slots.len()).expect("over 4 billion packets in flight");
                self.slots.push(Vec::new());
                slot
            }
        };
        let buf = &mut self.slots[slot as usize];
        buf.clear();
        buf.extend_from_slice(datagram);
        slot
    }

    /// A second slot with the same bytes as `slot`.
    pub(crate) fn duplicate(&mut self, slot: u32) -> u32 {
        let copy = self.insert(&[]);
        let (src, dst) = if slot < copy {
            let (low, high) = self.slots.split_at_mut(copy as usize);
            (&low[slot as usize], &mut high[0])
        } else {
            let (low, high) = self.slots.split_at_mut(slot as usize);
            (&high[0], &mut low[copy as usize])
        };
        dst.extend_from_slice(src);
        copy
    }

    pub(crate) fn get_mut(&mut self, slot: u32) -> &mut Vec<u8> {
        &mut self.slots[slot as usize]
    }

    pub(crate) fn release(&mut self, slot: u32) {
        self.free.push(slot);
    }

    /// Slots ever created: the high-water mark of packets in flight.
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_reused_and_duplicates_are_equal() {
        let mut pool = PacketPool::default();
        let a = pool.insert(b"hello");
        let b = pool.duplicate(a);
        assert_ne!(a, b);
        assert_eq!(pool.get_mut(b).as_slice(), b"hello");
        pool.release(a);
        let c = pool.insert(b"xy");
        assert_eq!(c, a);
        assert_eq!(pool.get_mut(c).as_slice(), b"xy");
        pool.release(b);
        let d = pool.duplicate(c);
        assert_eq!(d, b);
        assert_eq!(pool.get_mut(d).as_slice(), b"xy");
        assert_eq!(pool.capacity(), 2);
    }
}
