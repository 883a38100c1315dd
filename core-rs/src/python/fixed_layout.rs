//! `FixedLayout`: the wire layout of a Flounder message of scalars, for
//! generated stubs' native send methods (`fast_send.rs`).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// The wire layout of a Flounder message of scalars (see `fixed_layout.rs`),
/// built once per message by a generated stub.
#[pyclass(frozen, module = "multihop._core")]
pub struct FixedLayout {
    pub(crate) layout: multihop_base::fixed_layout::FixedLayout,
}

#[pymethods]
impl FixedLayout {
    /// `fields`: one `(kind, n)` per argument, in order: ``("u", bytes)``,
    /// ``("i", bytes)``, ``("bool", 0)`` or ``("enum", number of values)``.
    #[new]
    fn new(number: u16, fields: Vec<(String, u32)>) -> PyResult<FixedLayout> {
        use multihop_base::fixed_layout::Field;
        let mut out = Vec::with_capacity(fields.len());
        for (kind, n) in fields {
            out.push(match (kind.as_str(), n) {
                ("u", 1 | 2 | 4 | 8) => Field::Unsigned(n as u8),
                ("i", 1 | 2 | 4 | 8) => Field::Signed(n as u8),
                ("bool", _) => Field::Bool,
                ("enum", _) => Field::Enum(n),
                _ => {
                    return Err(PyValueError::new_err(format!(
                        "unknown fixed field ({kind:?}, {n}): expected ('u'|'i', 1|2|4|8), ('bool', 0) or ('enum', count)"
                    )))
                }
            });
        }
        if out.len() > 64 {
            return Err(PyValueError::new_err(format!("a fixed layout takes at most 64 fields, got {}", out.len())));
        }
        multihop_base::fixed_layout::FixedLayout::new(number, out)
            .map(|layout| FixedLayout { layout })
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// Bytes of an encoded message.
    #[getter]
    fn size(&self) -> usize {
        self.layout.size()
    }
}
