//! `sqlx::migrate!` embeds `migrations/` at compile time; without this a migration added
//! since the last build would be missing from the binary (and from every test database).
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
