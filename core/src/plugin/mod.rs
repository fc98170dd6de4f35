//! Runtime plugins: strategies loaded from shared libraries.
//!
//! A plugin is a Rust crate of type `dylib` that depends on `engram-core` (and reaches Burn only
//! through its re-export, [`crate::burn`]) and ends with
//!
//! ```ignore
//! fn register(r: &mut engram_core::plugin::Registrar) -> engram_core::Result<()> {
//!     r.add(engram_core::registration!(forgetting "si", "synaptic intelligence", SiParams, build));
//!     Ok(())
//! }
//! engram_core::declare_plugin!(register);
//! ```
//!
//! # One copy of Burn
//!
//! engram-core is itself a Rust `dylib` (`libengram_core.so`), linked by the `engram` binary and
//! by every plugin, so the process holds one copy of engram-core and of Burn. That matters:
//! burn-autodiff keeps its graph bookkeeping in process-global statics, and a `cdylib` plugin
//! (which links its own copy of everything) would run tensor ops on a second, disconnected
//! autodiff. The integration test `plugins::penalty_in_plugin_backpropagates_like_the_host`
//! shows a penalty computed inside a loaded plugin giving exactly the host's gradients.
//!
//! # The checks, in order, before any plugin code runs
//!
//! Loading a library runs its constructors, so [`load`] first reads the plugin's
//! [`Declaration`] from the file itself (the ELF section [`SECTION`], parsed with the `object`
//! crate): the magic bytes, then [`ABI_VERSION`], then the [`BUILD_ID`] (rustc version,
//! engram-core version, Burn version, target, features, profile), which must equal the host's.
//! When a trial load is installed ([`set_probe`]; the `engram` binary installs one), the
//! library is next loaded in a child process, and a crash there refuses it
//! ([`PluginError::Crashed`]) without harming this process (see [`probe_in_child`]).
//! Only then is the library opened, with immediate binding (`RTLD_NOW`: an unresolved symbol is
//! an error now, not a crash later), and its `engram_plugin_register` function called. Plugins
//! register only through that function (no `inventory`), handing their factories to a
//! [`Registrar`]; panics inside it are caught in the plugin's frame and returned as errors.
//!
//! # At run time
//!
//! Every strategy a plugin builds is wrapped in a guard that catches a panic in any of its
//! methods and turns it into [`PluginError::Panicked`] (with the plugin's path, the strategy and
//! the method): the run stops with that typed error, the last checkpoint stays intact and the
//! host process does not abort. Libraries are never unloaded: every factory and strategy keeps an
//! [`Arc`] to its library, and the loader keeps one more for the life of the process.
//!
//! Loading a plugin runs its code with the host's rights: load only what you trust.

use crate::component::Registration;
use crate::error::Error;
use crate::strategy::{
    BatchContext, Controls, ForgettingStrategy, MemoryLayer, MemoryStrategy, Next, Position,
    Scheduler, StepContext, StepOutcome, StepRequest, StrategyState, TaskContext, TaskInfo,
};
use crate::{data::stream::Batch, model::Model};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor};
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

mod abi;
mod guard;
mod loader;
mod probe;
pub mod search;

/// Why a plugin could not be loaded or failed while running (defined with the other errors,
/// in [`crate::error`]).
pub use crate::error::PluginError;
pub use abi::*;
pub use guard::*;
pub use loader::*;
pub use probe::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declaration_layout_round_trips() {
        let d = Declaration::new("my-plugin");
        assert_eq!(Declaration::SIZE, 8 + 4 + 4 + BUILD_ID_CAP + 4 + NAME_CAP);
        // SAFETY: Declaration is plain old data.
        let bytes =
            unsafe { std::slice::from_raw_parts((&raw const d).cast::<u8>(), Declaration::SIZE) };
        let info = parse_declaration(bytes).unwrap();
        assert_eq!(info.abi_version, ABI_VERSION);
        assert_eq!(info.build_id, BUILD_ID);
        assert_eq!(info.name, "my-plugin");
        assert!(parse_declaration(&bytes[..20]).is_none());
        let mut bad = bytes.to_vec();
        bad[0] = b'X';
        assert!(parse_declaration(&bad).is_none());
    }

    #[test]
    fn build_id_names_its_fields_and_differences() {
        for key in [
            "rustc=",
            "engram-core=",
            "burn=0.22.1",
            "target=",
            "features=",
            "profile=",
        ] {
            assert!(BUILD_ID.contains(key), "{BUILD_ID} lacks {key}");
        }
        let other = BUILD_ID.replace("profile=", "profile=debug-O0-was-");
        assert_eq!(build_id_differences(&other, BUILD_ID), "profile");
        let err = check_declaration(
            Path::new("x.so"),
            &DeclarationInfo {
                abi_version: ABI_VERSION + 1,
                build_id: BUILD_ID.into(),
                name: "x".into(),
            },
        )
        .unwrap_err();
        assert!(matches!(err, PluginError::AbiMismatch { found, .. } if found == ABI_VERSION + 1));
    }

    #[test]
    fn non_libraries_are_refused_before_loading() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bogus.so");
        std::fs::write(&p, b"not a library").unwrap();
        assert!(matches!(
            load(&p),
            Err(PluginError::NotSharedLibrary { .. })
        ));
        assert!(matches!(
            load(&dir.path().join("absent.so")),
            Err(PluginError::Missing { .. })
        ));
    }
}

#[cfg(test)]
mod forwarding_tests {
    /// The `fn` names of the block that starts at `header` in `src` (up to the first line that
    /// is a lone `}`).
    fn methods(src: &str, header: &str) -> std::collections::BTreeSet<String> {
        let start = src.find(header).unwrap_or_else(|| panic!("no `{header}`"));
        let body = &src[start..];
        let end = body.find("\n}\n").expect("the block ends");
        body[..end]
            .lines()
            .filter_map(|l| {
                let l = l.trim_start();
                let rest = l.strip_prefix("fn ")?;
                Some(rest.split(['(', '<']).next()?.to_string())
            })
            .collect()
    }

    /// `Guarded` forwards every method of the three traits: a method it lacks would silently
    /// run the trait's default for a plugin's strategy instead of the plugin's own.
    #[test]
    fn guarded_forwards_every_trait_method() {
        let traits = include_str!("../strategy/mod.rs");
        let guard = include_str!("guard.rs");
        for t in ["ForgettingStrategy", "MemoryStrategy", "Scheduler"] {
            let want = methods(traits, &format!("pub trait {t}: Send"));
            let have = methods(
                guard,
                &format!("impl<T: {t} + ?Sized> {t} for Guarded<T> {{"),
            );
            assert!(want.len() >= 6, "{t}: {want:?}");
            assert_eq!(want, have, "{t}: the trait's methods vs Guarded's");
        }
    }
}

#[cfg(test)]
mod message_tests {
    /// The error enum is a leaf (crate::error imports nothing of engram), so its message names
    /// the declaration's section by value: it must stay this module's [`super::SECTION`].
    #[test]
    fn the_missing_declaration_message_names_the_section() {
        let e = super::PluginError::NoDeclaration {
            path: "x.so".into(),
        };
        assert!(e.to_string().contains(super::SECTION), "{e}");
    }
}
