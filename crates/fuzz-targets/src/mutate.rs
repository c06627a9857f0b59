//! A small deterministic mutator for the smoke test: libFuzzer's kinds of change (bit flips,
//! interesting bytes, truncation, deletion, duplication, insertion, splicing with another input)
//! drawn from a fixed-seed xorshift generator, so every run of `cargo test` tries the same inputs.

pub use crate::limits::MUTANT_BYTES_MAX;

/// xorshift64* with a fixed seed.
#[derive(Clone, Debug)]
pub struct Mutator {
    state: u64,
}

impl Mutator {
    /// A mutator whose sequence is fixed by `seed`.
    pub fn new(seed: u64) -> Mutator {
        Mutator { state: seed | 1 }
    }

    /// The next pseudo-random number.
    pub fn next_u64(&mut self) -> u64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number below `bound` (0 when `bound` is 0).
    pub fn below(&mut self, bound: usize) -> usize {
        if bound == 0 {
            return 0;
        }
        // The remainder is below `bound`, which is a usize.
        usize::try_from(self.next_u64() % bound as u64).unwrap_or(0)
    }

    /// `input` changed one to four times; `other` is what a splice takes bytes from.
    pub fn mutate(&mut self, input: &[u8], other: &[u8]) -> Vec<u8> {
        let mut bytes = input.to_vec();
        let rounds = 1 + self.below(4);
        for _ in 0..rounds {
            self.mutate_once(&mut bytes, other);
        }
        bytes.truncate(MUTANT_BYTES_MAX);
        bytes
    }

    fn mutate_once(&mut self, bytes: &mut Vec<u8>, other: &[u8]) {
        const INTERESTING: [u8; 8] = [0x00, 0x01, 0x7f, 0x80, 0xff, 0xfe, 0x20, 0x30];
        let len = bytes.len();
        match self.below(9) {
            0 if len > 0 => {
                let at = self.below(len);
                bytes[at] ^= 1 << self.below(8);
            }
            1 if len > 0 => {
                let at = self.below(len);
                bytes[at] = INTERESTING[self.below(INTERESTING.len())];
            }
            2 if len > 0 => {
                let at = self.below(len);
                // One up or one down.
                bytes[at] = if self.below(2) == 0 {
                    bytes[at].wrapping_add(1)
                } else {
                    bytes[at].wrapping_sub(1)
                };
            }
            3 => bytes.truncate(self.below(len + 1)),
            4 if len > 0 => {
                let start = self.below(len);
                let end = start + 1 + self.below((len - start).min(16));
                bytes.drain(start..end);
            }
            5 if len > 0 => {
                let start = self.below(len);
                let end = start + 1 + self.below((len - start).min(64));
                let chunk = bytes[start..end].to_vec();
                let at = self.below(len + 1);
                bytes.splice(at..at, chunk);
            }
            6 => {
                let at = self.below(len + 1);
                let count = 1 + self.below(8);
                let random: Vec<u8> = (0..count)
                    .map(|_| self.next_u64().to_le_bytes()[0])
                    .collect();
                bytes.splice(at..at, random);
            }
            7 if !other.is_empty() => {
                let keep = self.below(len + 1);
                let from = self.below(other.len());
                bytes.truncate(keep);
                bytes.extend_from_slice(&other[from..]);
            }
            _ => {
                // Overwrite a run with bytes of the other input (or repeat one of our own).
                if len > 0 && !other.is_empty() {
                    let at = self.below(len);
                    let from = self.below(other.len());
                    let count = (len - at).min(other.len() - from).min(1 + self.below(32));
                    bytes[at..at + count].copy_from_slice(&other[from..from + count]);
                }
            }
        }
    }
}
