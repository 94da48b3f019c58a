//! Logging: the conventions shared with the projector (`lectern_runtime`).

pub fn init() {
    lectern_runtime::init_logging("info");
}
