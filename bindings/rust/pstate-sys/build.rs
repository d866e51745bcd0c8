//! Finds libpstate and writes the crate's function forwarders.
//!
//! The library: $PSTATE_LIB_DIR (a build tree or a private prefix), else `pkg-config --libs-only-L
//! pstate`, else none. Its path (DIR/libpstate.so.<major>, the major being src/bindings.rs's
//! PSTATE_ABI_MAJOR: libpstate.so.1) is compiled into the crate
//! (PSTATE_SYS_LIBRARY, read by src/lib.rs) as the first place to load it from at run time, before
//! the loader's default search; the directory is also passed on as DEP_PSTATE_LIB_DIR (`links`
//! metadata) for crates that want it. Nothing is linked: a binary that depends on this crate,
//! directly or through `pstate`, has no DT_NEEDED on libpstate.so.1 and needs no rpath or
//! LD_LIBRARY_PATH to start (cargo cannot give a dependent's binary an rpath).
//!
//! The forwarders: one `pub unsafe fn pstate_<member>` per member of pstate_api_t in
//! src/bindings.rs, with the member's signature, calling through the table of the loaded
//! library (OUT_DIR/forwarders.rs, included by src/lib.rs). A new entry point of pstate.h reaches
//! Rust by regenerating src/bindings.rs; nothing here names a function.
use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn pkg_config_dir() -> Option<String> {
    let out = Command::new("pkg-config").args(["--libs-only-L", "pstate"]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    text.split_whitespace().find_map(|f| f.strip_prefix("-L").map(str::to_owned))
}

/// The text between the bracket at byte `open` ('(' or '<') and its match ("->" is no bracket).
fn enclosed(text: &str, open: usize) -> &str {
    let bytes = text.as_bytes();
    let mut depth = 0i32;
    for i in open..bytes.len() {
        match bytes[i] {
            b'(' | b'<' => depth += 1,
            b'>' if bytes[i - 1] == b'-' => {}
            b')' | b'>' => {
                depth -= 1;
                if depth == 0 {
                    return &text[open + 1..i];
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced brackets in src/bindings.rs: {}", &text[open..]);
}

/// Splits at the commas that are not inside brackets.
fn top_level(text: &str) -> Vec<String> {
    let (mut parts, mut depth, mut cur) = (Vec::new(), 0i32, String::new());
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        match c {
            '(' | '<' => depth += 1,
            '>' if i > 0 && chars[i - 1] == '-' => {}
            ')' | '>' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(cur.trim().to_owned());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        parts.push(cur.trim().to_owned());
    }
    parts
}

/// PSTATE_ABI_MAJOR of src/bindings.rs: the SONAME's number (libpstate.so.<major>).
fn abi_major(bindings: &str) -> u32 {
    const CONST: &str = "pub const PSTATE_ABI_MAJOR: u32 = ";
    let at = bindings.find(CONST).expect("src/bindings.rs has no PSTATE_ABI_MAJOR") + CONST.len();
    let digits: String = bindings[at..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().expect("PSTATE_ABI_MAJOR of src/bindings.rs is a number")
}

/// The forwarders for pstate_api_t's members, as Rust source.
fn forwarders(bindings: &str) -> String {
    const FN: &str = "unsafe extern \"C\" fn";
    let start = bindings.find("pub struct pstate_api_t {").expect("src/bindings.rs has no pstate_api_t");
    let open = start + bindings[start..].find('{').unwrap() + 1;
    let close = open + bindings[open..].find("\n}").expect("the end of pstate_api_t");
    let body = bindings[open..close].split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = String::new();
    for field in top_level(&body) {
        let field = match field.strip_prefix("pub ") {
            Some(f) => f,
            None => continue,
        };
        let (name, ty) = field.split_once(':').expect("a field");
        let ty = ty.trim();
        let at = match ty.find(FN) {
            Some(at) => at + FN.len(),
            None => continue, // struct_size, abi_major, library_version
        };
        if name.trim() == "last_error" {
            continue; // written by hand in lib.rs: it answers for the fallbacks too
        }
        let args = enclosed(ty, at);
        let rest = ty[at + args.len() + 2..].trim();
        let ret = rest.strip_prefix("->").map(|r| r.trim_end_matches(|c: char| c == '>' || c == ',' || c == ' ').trim());
        let names: Vec<String> = top_level(args).iter().map(|a| a.split_once(':').expect("name: type").0.trim().to_owned()).collect();
        let ret_text = ret.map_or(String::new(), |r| format!(" -> {r}"));
        writeln!(
            out,
            "/// `pstate_{name}` of pstate.h, through the loaded library's function table.\n\
             pub unsafe fn pstate_{name}({args}){ret_text} {{\n    \
                 match member!({name}) {{\n        Some(f) => Fallback::returned(f({call})),\n        \
                 None => Fallback::fallback(\"pstate_{name}\"),\n    }}\n}}\n",
            call = names.join(", ")
        )
        .unwrap();
    }
    out
}

fn main() {
    println!("cargo:rerun-if-env-changed=PSTATE_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-changed=src/bindings.rs");
    let bindings = std::fs::read_to_string("src/bindings.rs").expect("read src/bindings.rs");
    let soname = format!("libpstate.so.{}", abi_major(&bindings));
    let dir = env::var("PSTATE_LIB_DIR").ok().filter(|d| !d.is_empty()).or_else(pkg_config_dir);
    let mut library = String::new();
    if let Some(dir) = dir {
        let dir = Path::new(&dir).canonicalize().unwrap_or_else(|_| PathBuf::from(&dir));
        let so = dir.join(&soname);
        if so.exists() {
            library = so.display().to_string();
        } else {
            println!("cargo:warning={} has no {soname}: it will be looked for on the loader's path", dir.display());
        }
        println!("cargo:lib_dir={}", dir.display());
    }
    println!("cargo:rustc-env=PSTATE_SYS_LIBRARY={library}");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("forwarders.rs");
    std::fs::write(out, forwarders(&bindings)).expect("write forwarders.rs");
}
