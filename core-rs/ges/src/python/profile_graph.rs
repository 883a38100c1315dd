//! `ProfileGraph` and `MatchBatch`: the native profile graph (`crate::profile_graph`) for Python,
//! with the interface of `multihop.ges.profile_graph.ProfileGraph` (destinations are integers:
//! unit ids at a gatekeeper, client peer ids at a broker). The event engine reads the same graph
//! (the object is shared: `Arc<Mutex<..>>`), so the profile propagation protocol, in Python,
//! changes the graphs the engine matches with, between the engine's rounds.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::erp::SharedGraph;

use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PySet, PyTuple, PyType};

use crate::profile_graph::{Dest, Di, ProfileGraph as Graph, Scratch};

/// Lock a mutex (a panic while it was held leaves a graph whose last change may be half done;
/// Python sees the same state either way, so the lock is taken regardless).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn dest_of(v: &Bound<'_, PyAny>) -> PyResult<Dest> {
    if let Ok(x) = v.extract::<i64>() {
        return Ok(x as Dest);
    }
    if let Ok(x) = v.extract::<u64>() {
        return Ok(x as Dest);
    }
    Err(PyValueError::new_err(format!("a destination is an integer in -2**63 .. 2**64, got {}", v.repr().map(|r| r.to_string()).unwrap_or_default())))
}

pub(crate) fn dest_to_py(py: Python<'_>, d: Dest) -> PyResult<Bound<'_, PyAny>> {
    if let Ok(x) = i64::try_from(d) {
        Ok(x.into_pyobject(py)?.into_any())
    } else {
        Ok((d as u64).into_pyobject(py)?.into_any())
    }
}

fn chain_of(chain: &Bound<'_, PyAny>) -> PyResult<Vec<(PyBackedStr, PyBackedStr)>> {
    let c: Vec<(PyBackedStr, PyBackedStr)> = chain.extract()?;
    if c.is_empty() {
        return Err(PyValueError::new_err("a profile constrains at least one attribute"));
    }
    Ok(c)
}

fn count_of(count: i64) -> PyResult<u32> {
    u32::try_from(count).ok().filter(|&c| c > 0).ok_or_else(|| PyValueError::new_err(format!("count must be in 1 .. 2**32 - 1, got {count}")))
}

/// A profile graph whose destinations are integers (see `multihop.ges.profile_graph`).
#[pyclass(frozen, module = "multihop._ges")]
pub struct ProfileGraph {
    /// the graph, shared with the event engines that decide with it
    pub(crate) graph: SharedGraph,
    /// the working memory of the matches Python asks for
    scratch: Mutex<(Scratch, Vec<Di>)>,
}

#[pymethods]
impl ProfileGraph {
    #[new]
    fn new() -> Self {
        ProfileGraph { graph: Arc::new(Mutex::new(Graph::new())), scratch: Mutex::new((Scratch::default(), Vec::new())) }
    }

    /// A graph holding one predicate per ``(chain, unit)`` of ``items``.
    #[classmethod]
    fn of(_cls: &Bound<'_, PyType>, items: &Bound<'_, PyAny>) -> PyResult<Self> {
        let g = Self::new();
        for item in items.try_iter()? {
            let item = item?;
            let (chain, unit): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
            g.add(&chain, &unit, 1)?;
        }
        Ok(g)
    }

    /// Add ``count`` predicates of ``unit`` for ``chain``; True if the chain was new for that unit.
    #[pyo3(signature = (chain, unit, count=1))]
    fn add(&self, chain: &Bound<'_, PyAny>, unit: &Bound<'_, PyAny>, count: i64) -> PyResult<bool> {
        let c = chain_of(chain)?;
        let refs: Vec<(&str, &str)> = c.iter().map(|(a, v)| (&**a, &**v)).collect();
        let (u, n) = (dest_of(unit)?, count_of(count)?);
        Ok(lock(&self.graph).add(&refs, u, n))
    }

    /// Remove ``count`` predicates; edges and nodes whose counts reach zero go. True if the unit has
    /// no predicate left for the chain. Raises KeyError (the graph unchanged) if the unit has fewer
    /// than ``count`` predicates for it.
    #[pyo3(signature = (chain, unit, count=1))]
    fn remove(&self, chain: &Bound<'_, PyAny>, unit: &Bound<'_, PyAny>, count: i64) -> PyResult<bool> {
        let c = chain_of(chain)?;
        let refs: Vec<(&str, &str)> = c.iter().map(|(a, v)| (&**a, &**v)).collect();
        let (u, n) = (dest_of(unit)?, count_of(count)?);
        lock(&self.graph)
            .remove(&refs, u, n)
            .map_err(|_| PyKeyError::new_err(format!("no profile {} for {}", chain.repr().map(|r| r.to_string()).unwrap_or_default(), unit)))
    }

    /// The destinations of an event with these attribute names and canonical values.
    #[pyo3(name = "match")]
    fn match_<'py>(&self, py: Python<'py>, names: Vec<PyBackedStr>, values: Vec<PyBackedStr>) -> PyResult<Bound<'py, PySet>> {
        let n: Vec<&str> = names.iter().map(|s| &**s).collect();
        let v: Vec<&str> = values.iter().map(|s| &**s).collect();
        let graph = lock(&self.graph);
        let mut guard = lock(&self.scratch);
        let (scratch, out) = &mut *guard;
        graph.match_into(&n, &v, scratch, out);
        let set = PySet::empty(py)?;
        for &k in out.iter() {
            set.add(dest_to_py(py, graph.dest(k))?)?;
        }
        Ok(set)
    }

    /// Match every event of ``batch`` in Rust, the GIL released (for benchmarks: no Python object is
    /// made per event); returns the number of destinations found, all events together.
    fn match_batch(&self, py: Python<'_>, batch: &MatchBatch) -> u64 {
        let events = batch.events.clone();
        py.detach(move || {
            let graph = lock(&self.graph);
            let mut guard = lock(&self.scratch);
            let (scratch, out) = &mut *guard;
            let mut total = 0u64;
            let mut n = Vec::new();
            for (names, values) in events.iter() {
                // (as the engine matches an event: its names looked up, each value when the walk gets to it)
                n.clear();
                n.extend(names.iter().map(|x| graph.resolve(x)));
                graph.match_lazy(&n, values, scratch, out);
                total += out.len() as u64;
            }
            total
        })
    }

    /// Every ``(chain, unit, count)`` held (for tests and status; in no particular order).
    fn chains<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let held = lock(&self.graph).chains();
        held.into_iter()
            .map(|(chain, d, c)| {
                let pairs = PyTuple::new(py, chain.iter().map(|(a, v)| PyTuple::new(py, [a.as_str(), v.as_str()])).collect::<PyResult<Vec<_>>>()?)?;
                PyTuple::new(py, [pairs.into_any(), dest_to_py(py, d)?, c.into_pyobject(py)?.into_any()])
            })
            .collect()
    }

    /// Every destination with at least one predicate.
    fn units<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PySet>> {
        let held = lock(&self.graph).chains();
        let set = PySet::empty(py)?;
        for (_, d, _) in held {
            set.add(dest_to_py(py, d)?)?;
        }
        Ok(set)
    }

    /// Forget every profile.
    fn clear(&self) {
        lock(&self.graph).clear();
    }

    /// Profiles held (the sum of all predicate counts on destination edges).
    #[getter]
    fn profiles(&self) -> u64 {
        lock(&self.graph).profiles()
    }

    /// Edges in the graph (destination edges included).
    #[getter]
    fn edges(&self) -> u64 {
        lock(&self.graph).edges()
    }

    /// Heap bytes the graph holds (an estimate from its vectors' and tables' capacities).
    fn heap_bytes(&self) -> usize {
        lock(&self.graph).heap_bytes()
    }
}

/// Events held in Rust for :meth:`ProfileGraph.match_batch`: ``(names, values)`` pairs.
#[pyclass(frozen, module = "multihop._ges")]
pub struct MatchBatch {
    events: Arc<Vec<(Vec<String>, Vec<String>)>>,
}

#[pymethods]
impl MatchBatch {
    #[new]
    fn new(events: Vec<(Vec<String>, Vec<String>)>) -> Self {
        MatchBatch { events: Arc::new(events) }
    }

    fn __len__(&self) -> usize {
        self.events.len()
    }
}

/// Register the classes.
pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ProfileGraph>()?;
    m.add_class::<MatchBatch>()?;
    Ok(())
}
