//! Logging: the conventions shared with the projector (`lectern_schema::ops`).

pub fn init() {
    lectern_schema::ops::init_logging("info");
}
