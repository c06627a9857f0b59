//! The TLS presentation language (RFC 5246 §4) as far as RFC 6962 uses it.
//!
//! Integers are big-endian and fixed width (`uint8`, `uint16`, `uint24`, `uint64`); a variable
//! length vector `opaque x<min..max>` is prefixed by its length in bytes, in as many bytes as
//! it takes to write `max`. Decoding is strict: short input, a length outside the declared
//! bounds and bytes left over after a structure are all errors, because the bytes here are
//! hashed and signed and two parses of the same bytes must never disagree.

use thiserror::Error;

/// The declared bounds of a variable-length vector, `<min..max>` in bytes.
///
/// The length prefix is as wide as `max` needs (RFC 5246 §4.3): one byte up to 255, two up to
/// 65535, three up to 2^24-1, four beyond.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VectorBounds {
    /// Fewest bytes the vector may hold.
    pub min: usize,
    /// Most bytes the vector may hold; also fixes the width of the length prefix.
    pub max: usize,
}

impl VectorBounds {
    /// Bounds `<min..max>`.
    pub const fn new(min: usize, max: usize) -> Self {
        Self { min, max }
    }

    /// Width in bytes of the length prefix for these bounds.
    pub const fn length_prefix_bytes(self) -> usize {
        if self.max <= 0xFF {
            1
        } else if self.max <= 0xFFFF {
            2
        } else if self.max <= 0xFF_FFFF {
            3
        } else {
            4
        }
    }

    const fn contains(self, length: usize) -> bool {
        length >= self.min && length <= self.max
    }
}

/// Why a value could not be written in the TLS encoding.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum EncodeError {
    /// A vector's length lies outside its declared bounds (an empty certificate, say, or
    /// extensions over 64 KiB).
    #[error("{field} is {length} bytes, outside the allowed <{min}..{max}>")]
    LengthOutOfBounds {
        /// The RFC field being written.
        field: &'static str,
        /// Its length in bytes.
        length: usize,
        /// The declared minimum.
        min: usize,
        /// The declared maximum.
        max: usize,
    },
    /// An integer does not fit its fixed width (only `uint24` can overflow).
    #[error("{field} value {value} does not fit in {bytes} bytes")]
    IntegerTooLarge {
        /// The RFC field being written.
        field: &'static str,
        /// The value.
        value: u64,
        /// The field width in bytes.
        bytes: usize,
    },
}

/// Why bytes could not be read as the expected TLS structure. Offsets count from the start of
/// the whole input.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// The input ends before the field does.
    #[error(
        "truncated input: {field} at byte {offset} needs {needed} bytes but only {available} remain"
    )]
    Truncated {
        /// The RFC field being read.
        field: &'static str,
        /// Where the field starts.
        offset: usize,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left in the input (or in the enclosing vector).
        available: usize,
    },
    /// A length prefix declares a length outside the vector's bounds.
    #[error(
        "{field} at byte {offset} declares length {length}, outside the allowed <{min}..{max}>"
    )]
    LengthOutOfBounds {
        /// The RFC field being read.
        field: &'static str,
        /// Where its length prefix starts.
        offset: usize,
        /// The declared length.
        length: usize,
        /// The declared minimum.
        min: usize,
        /// The declared maximum.
        max: usize,
    },
    /// Bytes follow the end of a structure or remain inside a vector after its last element.
    #[error("{count} unexpected trailing bytes after {structure}, starting at byte {offset}")]
    TrailingBytes {
        /// What should have ended there.
        structure: &'static str,
        /// Where the extra bytes start.
        offset: usize,
        /// How many there are.
        count: usize,
    },
    /// An enumerated field holds a value this implementation does not know.
    #[error("{field} at byte {offset} has unknown value {value}")]
    UnknownValue {
        /// The RFC field being read.
        field: &'static str,
        /// Where the field starts.
        offset: usize,
        /// The value found.
        value: u64,
    },
}

/// Appends TLS-encoded fields to a byte buffer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsWriter {
    bytes: Vec<u8>,
}

impl TlsWriter {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }

    /// `uint8`.
    pub fn put_u8(&mut self, value: u8) {
        self.bytes.push(value);
    }

    /// `uint16`, big-endian.
    pub fn put_u16(&mut self, value: u16) {
        self.bytes.extend_from_slice(&value.to_be_bytes());
    }

    /// `uint24`, big-endian; fails if `value` needs more than 24 bits.
    pub fn put_u24(&mut self, field: &'static str, value: u32) -> Result<(), EncodeError> {
        if value > 0xFF_FFFF {
            return Err(EncodeError::IntegerTooLarge {
                field,
                value: u64::from(value),
                bytes: 3,
            });
        }
        self.bytes.extend_from_slice(&value.to_be_bytes()[1..]);
        Ok(())
    }

    /// `uint64`, big-endian.
    pub fn put_u64(&mut self, value: u64) {
        self.bytes.extend_from_slice(&value.to_be_bytes());
    }

    /// A fixed-length `opaque x[n]`: the bytes, with no prefix.
    pub fn put_fixed(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }

    /// A variable-length `opaque x<min..max>`: length prefix, then the bytes.
    pub fn put_opaque(
        &mut self,
        field: &'static str,
        bounds: VectorBounds,
        bytes: &[u8],
    ) -> Result<(), EncodeError> {
        if !bounds.contains(bytes.len()) {
            return Err(EncodeError::LengthOutOfBounds {
                field,
                length: bytes.len(),
                min: bounds.min,
                max: bounds.max,
            });
        }
        let prefix_bytes = bounds.length_prefix_bytes();
        let length = (bytes.len() as u64).to_be_bytes();
        self.bytes
            .extend_from_slice(&length[length.len() - prefix_bytes..]);
        self.bytes.extend_from_slice(bytes);
        Ok(())
    }

    /// A variable-length vector of structures: `contents` writes the elements, then the whole
    /// is length-prefixed and checked against `bounds`.
    pub fn put_vector(
        &mut self,
        field: &'static str,
        bounds: VectorBounds,
        contents: impl FnOnce(&mut TlsWriter) -> Result<(), EncodeError>,
    ) -> Result<(), EncodeError> {
        let mut inner = TlsWriter::new();
        contents(&mut inner)?;
        self.put_opaque(field, bounds, &inner.bytes)
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether nothing has been written.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The encoding.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

/// Reads TLS-encoded fields from a byte slice, front to back.
#[derive(Clone, Debug)]
pub struct TlsReader<'a> {
    input: &'a [u8],
    position: usize,
    /// Offset of `input[0]` within the outermost input, so errors point at absolute bytes.
    base_offset: usize,
    /// What this reader holds, for the trailing-bytes error.
    structure: &'static str,
}

impl<'a> TlsReader<'a> {
    /// A reader over `input`, which should hold exactly one `structure` (named in errors).
    pub fn new(input: &'a [u8], structure: &'static str) -> Self {
        Self {
            input,
            position: 0,
            base_offset: 0,
            structure,
        }
    }

    /// Absolute offset of the next byte to read.
    pub fn offset(&self) -> usize {
        self.base_offset + self.position
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.input.len() - self.position
    }

    /// Whether everything has been read.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    fn take(&mut self, field: &'static str, count: usize) -> Result<&'a [u8], DecodeError> {
        if count > self.remaining() {
            return Err(DecodeError::Truncated {
                field,
                offset: self.offset(),
                needed: count,
                available: self.remaining(),
            });
        }
        let bytes = &self.input[self.position..self.position + count];
        self.position += count;
        Ok(bytes)
    }

    fn read_uint(&mut self, field: &'static str, width: usize) -> Result<u64, DecodeError> {
        let bytes = self.take(field, width)?;
        Ok(bytes
            .iter()
            .fold(0u64, |value, &byte| (value << 8) | u64::from(byte)))
    }

    /// `uint8`.
    pub fn read_u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        Ok(self.take(field, 1)?[0])
    }

    /// `uint16`, big-endian.
    pub fn read_u16(&mut self, field: &'static str) -> Result<u16, DecodeError> {
        let bytes = self.read_fixed::<2>(field)?;
        Ok(u16::from_be_bytes(bytes))
    }

    /// `uint24`, big-endian.
    pub fn read_u24(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        let [a, b, c] = self.read_fixed::<3>(field)?;
        Ok(u32::from_be_bytes([0, a, b, c]))
    }

    /// `uint64`, big-endian.
    pub fn read_u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        let bytes = self.read_fixed::<8>(field)?;
        Ok(u64::from_be_bytes(bytes))
    }

    /// A fixed-length `opaque x[N]`.
    pub fn read_fixed<const N: usize>(
        &mut self,
        field: &'static str,
    ) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(field, N)?);
        Ok(out)
    }

    /// A variable-length `opaque x<min..max>`: its bytes, without the prefix.
    pub fn read_opaque(
        &mut self,
        field: &'static str,
        bounds: VectorBounds,
    ) -> Result<&'a [u8], DecodeError> {
        let prefix_offset = self.offset();
        let declared = self.read_uint(field, bounds.length_prefix_bytes())?;
        let length = usize::try_from(declared).unwrap_or(usize::MAX);
        if !bounds.contains(length) {
            return Err(DecodeError::LengthOutOfBounds {
                field,
                offset: prefix_offset,
                length,
                min: bounds.min,
                max: bounds.max,
            });
        }
        self.take(field, length)
    }

    /// A variable-length vector of structures: a reader over exactly its contents. Call
    /// [`TlsReader::finish`] on it once the elements are read.
    pub fn read_vector(
        &mut self,
        field: &'static str,
        bounds: VectorBounds,
    ) -> Result<TlsReader<'a>, DecodeError> {
        let contents = self.read_opaque(field, bounds)?;
        Ok(TlsReader {
            input: contents,
            position: 0,
            base_offset: self.offset() - contents.len(),
            structure: field,
        })
    }

    /// Checks that nothing is left: trailing bytes make the input ambiguous.
    pub fn finish(self) -> Result<(), DecodeError> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes {
                structure: self.structure,
                offset: self.offset(),
                count: self.remaining(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_big_endian_and_fixed_width() {
        let mut w = TlsWriter::new();
        w.put_u8(0x01);
        w.put_u16(0x0203);
        w.put_u24("u24", 0x04_0506).unwrap();
        w.put_u64(0x0708_090a_0b0c_0d0e);
        let bytes = w.into_bytes();
        assert_eq!(bytes, [1, 2, 3, 4, 5, 6, 7, 8, 9, 0xa, 0xb, 0xc, 0xd, 0xe]);

        let mut r = TlsReader::new(&bytes, "ints");
        assert_eq!(r.read_u8("a").unwrap(), 0x01);
        assert_eq!(r.read_u16("b").unwrap(), 0x0203);
        assert_eq!(r.read_u24("c").unwrap(), 0x04_0506);
        assert_eq!(r.read_u64("d").unwrap(), 0x0708_090a_0b0c_0d0e);
        r.finish().unwrap();
    }

    #[test]
    fn u24_rejects_values_over_24_bits() {
        let mut w = TlsWriter::new();
        assert_eq!(
            w.put_u24("length", 0x100_0000),
            Err(EncodeError::IntegerTooLarge {
                field: "length",
                value: 0x100_0000,
                bytes: 3
            })
        );
        assert!(w.is_empty());
    }

    #[test]
    fn length_prefix_width_follows_the_maximum() {
        assert_eq!(VectorBounds::new(0, 255).length_prefix_bytes(), 1);
        assert_eq!(VectorBounds::new(0, 256).length_prefix_bytes(), 2);
        assert_eq!(VectorBounds::new(0, 0xFFFF).length_prefix_bytes(), 2);
        assert_eq!(VectorBounds::new(1, 0xFF_FFFF).length_prefix_bytes(), 3);
        assert_eq!(VectorBounds::new(0, 0x100_0000).length_prefix_bytes(), 4);

        for (bounds, prefix) in [
            (VectorBounds::new(0, 0xFF), vec![3u8]),
            (VectorBounds::new(0, 0xFFFF), vec![0, 3]),
            (VectorBounds::new(0, 0xFF_FFFF), vec![0, 0, 3]),
        ] {
            let mut w = TlsWriter::new();
            w.put_opaque("v", bounds, b"abc").unwrap();
            let mut expected = prefix;
            expected.extend_from_slice(b"abc");
            assert_eq!(w.into_bytes(), expected);
        }
    }

    #[test]
    fn opaque_encoding_enforces_bounds() {
        let bounds = VectorBounds::new(1, 4);
        let mut w = TlsWriter::new();
        assert_eq!(
            w.put_opaque("cert", bounds, b""),
            Err(EncodeError::LengthOutOfBounds {
                field: "cert",
                length: 0,
                min: 1,
                max: 4
            })
        );
        assert!(w.put_opaque("cert", bounds, b"12345").is_err());
        assert!(w.is_empty(), "a rejected field writes nothing");
        w.put_opaque("cert", bounds, b"1234").unwrap();
        assert_eq!(w.into_bytes(), [4, b'1', b'2', b'3', b'4']);
    }

    #[test]
    fn reading_past_the_end_says_which_field_and_where() {
        let mut r = TlsReader::new(&[0, 1, 2], "thing");
        r.read_u8("version").unwrap();
        let err = r.read_u64("timestamp").unwrap_err();
        assert_eq!(
            err,
            DecodeError::Truncated {
                field: "timestamp",
                offset: 1,
                needed: 8,
                available: 2
            }
        );
        let message = err.to_string();
        assert!(
            message.contains("timestamp") && message.contains("byte 1"),
            "{message}"
        );
    }

    #[test]
    fn a_length_longer_than_the_input_is_truncation() {
        // Declares 5 bytes, holds 2.
        let mut r = TlsReader::new(&[0, 5, 0xaa, 0xbb], "x");
        assert_eq!(
            r.read_opaque("extensions", VectorBounds::new(0, 0xFFFF)),
            Err(DecodeError::Truncated {
                field: "extensions",
                offset: 2,
                needed: 5,
                available: 2
            })
        );
    }

    #[test]
    fn a_length_outside_the_bounds_is_rejected_before_reading() {
        let mut r = TlsReader::new(&[0, 0, 0], "x");
        assert_eq!(
            r.read_opaque("certificate", VectorBounds::new(1, 0xFF_FFFF)),
            Err(DecodeError::LengthOutOfBounds {
                field: "certificate",
                offset: 0,
                length: 0,
                min: 1,
                max: 0xFF_FFFF
            })
        );
        let mut r = TlsReader::new(&[9, 1, 2, 3, 4, 5, 6, 7, 8, 9], "x");
        assert!(matches!(
            r.read_opaque("small", VectorBounds::new(0, 8)),
            Err(DecodeError::LengthOutOfBounds { length: 9, .. })
        ));
    }

    #[test]
    fn trailing_bytes_are_reported_with_their_offset() {
        let mut r = TlsReader::new(&[1, 2, 3], "MerkleTreeLeaf");
        r.read_u8("version").unwrap();
        assert_eq!(
            r.finish(),
            Err(DecodeError::TrailingBytes {
                structure: "MerkleTreeLeaf",
                offset: 1,
                count: 2
            })
        );
    }

    #[test]
    fn nested_vectors_report_absolute_offsets() {
        let mut w = TlsWriter::new();
        w.put_u8(7);
        w.put_vector("chain", VectorBounds::new(0, 0xFF_FFFF), |inner| {
            inner.put_opaque("cert", VectorBounds::new(1, 0xFF_FFFF), b"ab")?;
            inner.put_u8(0xee); // a stray byte inside the vector
            Ok(())
        })
        .unwrap();
        let bytes = w.into_bytes();
        assert_eq!(bytes, [7, 0, 0, 6, 0, 0, 2, b'a', b'b', 0xee]);

        let mut r = TlsReader::new(&bytes, "outer");
        r.read_u8("tag").unwrap();
        let mut chain = r
            .read_vector("chain", VectorBounds::new(0, 0xFF_FFFF))
            .unwrap();
        assert_eq!(chain.offset(), 4);
        assert_eq!(
            chain
                .read_opaque("cert", VectorBounds::new(1, 0xFF_FFFF))
                .unwrap(),
            b"ab"
        );
        assert_eq!(
            chain.finish(),
            Err(DecodeError::TrailingBytes {
                structure: "chain",
                offset: 9,
                count: 1
            })
        );
        r.finish().unwrap();
    }
}
