//! Fixtures the engine's unit tests share: a directory of labelled files and the policy that
//! labels them.

use std::path::Path;

use germline_policy::Policy;

/// A temporary directory holding `files` (path under it, contents), their directories made.
pub(crate) fn tree<'a, C: AsRef<[u8]>>(
    files: impl IntoIterator<Item = (&'a str, C)>,
) -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tempdir");
    for (name, contents) in files {
        let p = d.path().join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&p, contents).expect("write");
    }
    d
}

/// A policy of the labels `hr` and `finance` that labels the files under `<dir>/hr` hr and the
/// SQLite URIs of `<dir>/fin` finance, then `rules` (TOML; `{d}` stands for `dir`).
pub(crate) fn policy(dir: &Path, rules: &str) -> Policy {
    let d = dir.display();
    let text = format!(
        r#"[labels]
hr = "hr"
finance = "finance"

[[item]]
path = "{d}/hr/**"
label = ["hr"]

[[item]]
uri = "sqlite://{d}/fin/*"
label = ["finance"]
{}
"#,
        rules.replace("{d}", &d.to_string())
    );
    Policy::parse(Path::new("p.toml"), &text).expect("policy")
}
