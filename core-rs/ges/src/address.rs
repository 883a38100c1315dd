//! Unit ids (`python/multihop/ges/address.py`): an address packed 6 bits per part (top part first),
//! the parts below the unit's level cleared, the level in the top 4 bits. Containment is a mask and
//! a compare.

const BITS: u32 = 6;
const LEVEL_SHIFT: u32 = 60;
const CODE_MASK: u64 = (1 << LEVEL_SHIFT) - 1;

/// The level of a unit id.
#[inline]
pub fn unit_level(uid: u64) -> u32 {
    (uid >> LEVEL_SHIFT) as u32
}

/// The mask keeping the parts at and above `level` (the parts below cleared).
#[inline]
fn above(level: u32) -> u64 {
    let shift = BITS * level;
    if shift >= 64 {
        0
    } else {
        !((1u64 << shift) - 1)
    }
}

/// The id of the level-`level` unit containing broker `code` in a system of `levels` levels.
#[inline]
pub fn unit_id(code: u64, level: u32, levels: u32) -> u64 {
    if level == 0 {
        return code;
    }
    if level > levels {
        return ((levels + 1) as u64) << LEVEL_SHIFT; // the system
    }
    ((level as u64) << LEVEL_SHIFT) | (code & above(level))
}

/// Whether broker `code` lies in unit `uid` (the system, at level N + 1, contains every broker).
#[inline]
pub fn contains(uid: u64, code: u64) -> bool {
    (code & above(unit_level(uid))) == (uid & CODE_MASK)
}

/// The level-`level` unit containing unit `uid` (`level` >= its own).
#[inline]
pub fn ancestor(uid: u64, level: u32, levels: u32) -> u64 {
    unit_id(uid & CODE_MASK, level, levels)
}

/// For two codes: the highest level at which they differ (-1 if equal): Python's
/// `((a ^ b).bit_length() - 1) // 6`.
#[inline]
pub fn level_of_difference(a: u64, b: u64) -> i32 {
    let x = a ^ b;
    if x == 0 {
        -1
    } else {
        ((63 - x.leading_zeros()) / BITS) as i32
    }
}

/// A unit list (of an event copy, of the units a link leaves): a few unit ids, kept inline. Here, below both
/// the event routing (`erp.rs`) and the routing tables (`routing.rs`) that use it.
pub type Units = crate::small::Small<u64, 4>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_contain_their_brokers() {
        // 1.2.3.4 in a 3-level system: parts 1, 2, 3, 4 from the top
        let code = (1 << 18) | (2 << 12) | (3 << 6) | 4;
        let c = unit_id(code, 1, 3);
        assert_eq!(unit_level(c), 1);
        assert!(contains(c, code) && !contains(c, code ^ (1 << 6)));
        assert!(contains(unit_id(code, 4, 3), 12345));
        assert_eq!(ancestor(c, 2, 3), unit_id(code, 2, 3));
        assert_eq!(level_of_difference(code, code), -1);
        assert_eq!(level_of_difference(code, code ^ 1), 0);
        assert_eq!(level_of_difference(code, code ^ (1 << 18)), 3);
    }
}
