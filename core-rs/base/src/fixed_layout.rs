//! The wire layout of a Flounder message made only of scalars
//! (`flounder-idl/WIRE.md`): the uint16 message number, then each argument
//! little-endian at a fixed offset, nothing padded.
//!
//! Generated Python stubs send such messages through
//! `Channel._send_fixed(layout, *values)`, which encodes here without
//! building a Python bytes object.  Encoding refuses (returns `None`) any
//! value it is not sure about, and the stub then encodes with its own
//! Python code, which owns every error message: the fast path never decides
//! an error, so both paths behave alike by construction.

use crate::error::{Error, Result};

/// How one scalar argument is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// Unsigned integer of 1, 2, 4 or 8 bytes.
    Unsigned(u8),
    /// Two's-complement integer of 1, 2, 4 or 8 bytes.
    Signed(u8),
    /// One byte, 0 or 1.
    Bool,
    /// A uint32 below the enum's number of values.
    Enum(u32),
}

/// One argument's value as the caller extracted it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    Unsigned(u64),
    Signed(i64),
    Bool(bool),
}

impl Field {
    fn width(self) -> usize {
        match self {
            Field::Unsigned(n) | Field::Signed(n) => n as usize,
            Field::Bool => 1,
            Field::Enum(_) => 4,
        }
    }

    /// The little-endian bytes of `v`, or None when `v` does not fit.
    fn encode(self, v: Value) -> Option<u64> {
        match (self, v) {
            (Field::Unsigned(n), Value::Unsigned(x)) => (n == 8 || x >> (8 * n as u32) == 0).then_some(x),
            (Field::Unsigned(n), Value::Signed(x)) => (x >= 0).then_some(x as u64).filter(|x| n == 8 || x >> (8 * n as u32) == 0),
            (Field::Signed(n), Value::Signed(x)) => {
                let bits = 8 * n as u32;
                (n == 8 || (x >= -(1i64 << (bits - 1)) && x < (1i64 << (bits - 1)))).then_some(x as u64)
            }
            (Field::Signed(n), Value::Unsigned(x)) => {
                (x <= i64::MAX as u64).then_some(x as i64).and_then(|x| Field::Signed(n).encode(Value::Signed(x)))
            }
            (Field::Bool, Value::Bool(b)) => Some(b as u64),
            (Field::Enum(count), Value::Unsigned(x)) => (x < count as u64).then_some(x),
            (Field::Enum(count), Value::Signed(x)) => (x >= 0 && (x as u64) < count as u64).then_some(x as u64),
            _ => None,
        }
    }
}

/// A message of scalars: its number and its arguments' encodings.
#[derive(Clone, Debug)]
pub struct FixedLayout {
    number: u16,
    fields: Vec<Field>,
    size: usize,
}

impl FixedLayout {
    /// Largest message the fast path handles (larger ones use the stub's encoder).
    pub(crate) const MAX_BYTES: usize = 512;

    pub fn new(number: u16, fields: Vec<Field>) -> Result<FixedLayout> {
        for f in &fields {
            let ok = match f {
                Field::Unsigned(n) | Field::Signed(n) => matches!(n, 1 | 2 | 4 | 8),
                Field::Bool => true,
                Field::Enum(count) => *count > 0,
            };
            if !ok {
                return Err(Error::invalid(format!("field encoding {f:?} is not a Flounder scalar")));
            }
        }
        let size = 2 + fields.iter().map(|f| f.width()).sum::<usize>();
        if size > Self::MAX_BYTES {
            return Err(Error::invalid(format!("a fixed layout of {size} bytes exceeds {} bytes", Self::MAX_BYTES)));
        }
        Ok(FixedLayout { number, fields, size })
    }

    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    /// Bytes of an encoded message.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Encode `values` into `out` (at least `size()` bytes); None when a
    /// value does not fit its field or the count is wrong.
    pub fn encode(&self, values: &[Value], out: &mut [u8]) -> Option<usize> {
        if values.len() != self.fields.len() {
            return None;
        }
        self.encode_with(out, |i| Some(values[i]))
    }

    /// Encode the value `value(i)` of each field `i` into `out` (at least
    /// `size()` bytes); None as soon as a value is missing or does not fit.
    #[inline]
    pub fn encode_with(&self, out: &mut [u8], mut value: impl FnMut(usize) -> Option<Value>) -> Option<usize> {
        if out.len() < self.size {
            return None;
        }
        out[..2].copy_from_slice(&self.number.to_le_bytes());
        let mut at = 2;
        for (i, f) in self.fields.iter().enumerate() {
            let w = f.width();
            let x = f.encode(value(i)?)?;
            out[at..at + w].copy_from_slice(&x.to_le_bytes()[..w]);
            at += w;
        }
        Some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lays_out_little_endian_at_fixed_offsets() {
        let l = FixedLayout::new(3, vec![Field::Unsigned(8), Field::Signed(2), Field::Bool, Field::Enum(3), Field::Unsigned(1)]).unwrap();
        assert_eq!(l.size(), 2 + 8 + 2 + 1 + 4 + 1);
        let mut out = [0u8; 64];
        let n =
            l.encode(&[Value::Unsigned(0x0102), Value::Signed(-2), Value::Bool(true), Value::Unsigned(2), Value::Unsigned(255)], &mut out).unwrap();
        assert_eq!(&out[..n], &[3, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0xFE, 0xFF, 1, 2, 0, 0, 0, 255]);
    }

    #[test]
    fn refuses_what_does_not_fit_so_the_caller_can_explain() {
        let mut out = [0u8; 64];
        let u8l = FixedLayout::new(1, vec![Field::Unsigned(1)]).unwrap();
        assert!(u8l.encode(&[Value::Unsigned(256)], &mut out).is_none());
        assert!(u8l.encode(&[Value::Signed(-1)], &mut out).is_none());
        assert!(u8l.encode(&[Value::Bool(true)], &mut out).is_none());
        let i8l = FixedLayout::new(1, vec![Field::Signed(1)]).unwrap();
        assert!(i8l.encode(&[Value::Signed(-129)], &mut out).is_none());
        assert!(i8l.encode(&[Value::Signed(128)], &mut out).is_none());
        assert_eq!(i8l.encode(&[Value::Signed(-128)], &mut out), Some(3));
        let e = FixedLayout::new(1, vec![Field::Enum(3)]).unwrap();
        assert!(e.encode(&[Value::Unsigned(3)], &mut out).is_none());
        assert!(e.encode(&[], &mut out).is_none());
        let u64l = FixedLayout::new(1, vec![Field::Unsigned(8), Field::Signed(8)]).unwrap();
        assert!(u64l.encode(&[Value::Unsigned(u64::MAX), Value::Unsigned(1 << 63)], &mut out).is_none());
        assert_eq!(u64l.encode(&[Value::Unsigned(u64::MAX), Value::Signed(i64::MIN)], &mut out), Some(18));
        assert!(FixedLayout::new(1, vec![Field::Unsigned(3)]).is_err());
        assert!(FixedLayout::new(1, vec![Field::Enum(0)]).is_err());
    }
}
