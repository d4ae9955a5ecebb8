//! Slot storage for queued jobs: stable indexes, O(1) insert and remove, freed slots reused
//! last-in first-out (so the slot a pop frees is still in cache for the next add).

/// One slot: a value, or a link in the free list.
#[derive(Debug)]
enum Entry<T> {
    Full(T),
    Free { next: Option<usize> },
}

/// A vector of slots with a free list.
#[derive(Debug)]
pub(super) struct Slab<T> {
    entries: Vec<Entry<T>>,
    free: Option<usize>,
    len: usize,
}

impl<T> Slab<T> {
    pub(super) fn new() -> Self {
        Self {
            entries: Vec::new(),
            free: None,
            len: 0,
        }
    }

    /// Stores `value` and returns its index.
    pub(super) fn insert(&mut self, value: T) -> usize {
        self.len += 1;
        if let Some(index) = self.free
            && let Some(entry) = self.entries.get_mut(index)
            && let Entry::Free { next } = *entry
        {
            self.free = next;
            *entry = Entry::Full(value);
            return index;
        }
        self.entries.push(Entry::Full(value));
        self.entries.len() - 1
    }

    /// Takes the value at `index` out, freeing the slot.
    pub(super) fn remove(&mut self, index: usize) -> Option<T> {
        let entry = self.entries.get_mut(index)?;
        if matches!(entry, Entry::Free { .. }) {
            return None;
        }
        let Entry::Full(value) = std::mem::replace(entry, Entry::Free { next: self.free }) else {
            return None;
        };
        self.free = Some(index);
        self.len -= 1;
        Some(value)
    }

    pub(super) fn get(&self, index: usize) -> Option<&T> {
        match self.entries.get(index)? {
            Entry::Full(value) => Some(value),
            Entry::Free { .. } => None,
        }
    }

    pub(super) fn get_mut(&mut self, index: usize) -> Option<&mut T> {
        match self.entries.get_mut(index)? {
            Entry::Full(value) => Some(value),
            Entry::Free { .. } => None,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::Slab;

    #[test]
    fn reuses_the_last_freed_slot() {
        let mut slab = Slab::new();
        let a = slab.insert("a");
        let b = slab.insert("b");
        assert_eq!(slab.remove(a), Some("a"));
        assert_eq!(slab.remove(a), None);
        assert_eq!(slab.get(a), None);
        assert_eq!(slab.remove(b), Some("b"));
        assert_eq!(slab.insert("c"), b, "last freed first");
        assert_eq!(slab.insert("d"), a);
        assert_eq!(slab.insert("e"), 2);
        assert_eq!(slab.len(), 3);
        if let Some(v) = slab.get_mut(a) {
            *v = "D";
        }
        assert_eq!(slab.get(a), Some(&"D"));
        assert_eq!(slab.remove(99), None);
    }
}
