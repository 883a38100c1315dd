//! The C ABI. See include/multihop.h. (Being written.)
