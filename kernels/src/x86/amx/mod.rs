//! AMX-INT8 tiles (Sapphire Rapids and later Xeons): one `tdpbsud` multiplies up to 16 tokens'
//! int8 activations by 16 rows × 64 codes, 16,384 multiply-adds, where a `vpdpbusd` does 64.
//! Used where several tokens share one weight pass (verification, batched decode, prefill);
//! a single token stays on the AVX-512 VNNI kernels, which the memory bounds anyway.
//!
//! The tile instructions are written as inline assembly: Rust's AMX intrinsics are not
//! stable. Each tile register is named in the instruction, so the helpers below take the
//! register as a const generic and expand to one instruction each.
//!
//! Linux hands out the tile state only on request (`arch_prctl(ARCH_REQ_XCOMP_PERM)`), once
//! per process: [`permitted`] asks, and detection uses AMX only when it was granted.

mod pipeline;
pub(crate) mod q4p;
pub(crate) mod q8p;

use std::arch::asm;
use std::arch::x86_64::__cpuid_count;

/// Whether the CPU has AMX-TILE and AMX-INT8 (CPUID leaf 7: EDX bits 24 and 25) and the
/// kernel let this process use the tile state.
pub(crate) fn permitted() -> bool {
    // CPUID leaf 7 exists on every CPU with AVX-512, which the caller checked first.
    let leaf7 = __cpuid_count(7, 0);
    if leaf7.edx & (1 << 24) == 0 || leaf7.edx & (1 << 25) == 0 {
        return false;
    }
    request_tile_state()
}

#[cfg(target_os = "linux")]
fn request_tile_state() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: arch_prctl with ARCH_REQ_XCOMP_PERM only asks the kernel for permission to use
    // a register state; it reads and writes no memory of ours.
    unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        ) == 0
    }
}

#[cfg(not(target_os = "linux"))]
fn request_tile_state() -> bool {
    false
}

/// Tokens per tile: the A and C tiles' rows.
pub(crate) const TOKENS: usize = 16;

/// Tokens sharing one pass over a group's weights: two token tiles (C tiles 0/1 and 6/7, one
/// per block parity, A tiles 2/3, B tiles 4/5).
pub(crate) const SPAN: usize = 2 * TOKENS;

thread_local! {
    /// Each pool thread's activations as A rows, kept between calls.
    static XS: std::cell::RefCell<Vec<i8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Splits `acts` into spans of at most [`SPAN`] tokens, as even as they go (40 tokens: 20 +
/// 20), each in one or two token tiles of `m` rows (an odd count's second tile ends with a row
/// of zeros); copies each span's activations (`pick`) into rows `cols` apart, configures the
/// tiles (A: `kw` bytes per row, B: `kw / 4` rows), and calls `f(xs, tokens, t0, m, tiles)`.
/// Releases the tiles at the end.
///
/// # Safety
/// The CPU has AMX-TILE and AMX-INT8 and the process holds the tile state; `pick` gives at
/// least `cols` activations per token; `kw` is 16, 32 or 64.
#[inline]
pub(crate) unsafe fn each_span(
    acts: &[crate::act::QuantActs],
    cols: usize,
    kw: usize,
    pick: impl Fn(&crate::act::QuantActs) -> &[i8],
    mut f: impl FnMut(&[i8], &[crate::act::QuantActs], usize, usize, usize),
) {
    XS.with(|xs| {
        let xs = &mut *xs.borrow_mut();
        let n = acts.len();
        let spans = n.div_ceil(SPAN);
        let mut t0 = 0;
        for i in 0..spans {
            let nt = (n - t0).div_ceil(spans - i);
            let tiles = nt.div_ceil(TOKENS);
            let m = nt.div_ceil(tiles);
            xs.clear();
            for a in &acts[t0..t0 + nt] {
                xs.extend_from_slice(&pick(a)[..cols]);
            }
            xs.resize(tiles * m * cols, 0);
            let mut cfg = Config::new();
            for t in [0, 1, 6, 7] {
                cfg.tile(t, m, 64);
            }
            for t in [2, 3] {
                cfg.tile(t, m, kw);
            }
            for t in [4, 5] {
                cfg.tile(t, kw / 4, 64);
            }
            cfg.load();
            f(xs, &acts[t0..t0 + nt], t0, m, tiles);
            t0 += nt;
        }
        release();
    });
}

/// A tile configuration (palette 1): rows and bytes per row of each of the 8 registers.
#[repr(C, align(64))]
pub(crate) struct Config {
    bytes: [u8; 64],
}

impl Config {
    pub(crate) fn new() -> Config {
        let mut bytes = [0u8; 64];
        bytes[0] = 1;
        Config { bytes }
    }

    /// Register `t` holds `rows` rows of `colsb` bytes (at most 16 and 64).
    pub(crate) fn tile(&mut self, t: usize, rows: usize, colsb: usize) {
        assert!(t < 8 && rows <= 16 && colsb <= 64);
        self.bytes[16 + 2 * t..][..2].copy_from_slice(&(colsb as u16).to_le_bytes());
        self.bytes[48 + t] = rows as u8;
    }

    /// Loads this configuration.
    ///
    /// # Safety
    /// The CPU has AMX-TILE and the process may use the tile state ([`permitted`]).
    #[inline]
    pub(crate) unsafe fn load(&self) {
        // SAFETY: the configuration is 64 valid bytes; the caller holds AMX permission.
        asm!("ldtilecfg [{}]", in(reg) self.bytes.as_ptr(), options(nostack, readonly));
    }
}

/// Releases the tile state (so a context switch no longer saves 8 KB of it).
///
/// # Safety
/// As [`Config::load`].
#[inline]
pub(crate) unsafe fn release() {
    asm!("tilerelease", options(nostack, nomem));
}

macro_rules! tile_ops {
    ($($t:literal),*) => {
        /// Zeroes tile register `T`.
        ///
        /// # Safety
        /// A configuration is loaded in which tile `T` is set up.
        #[inline(always)]
        pub(crate) unsafe fn zero<const T: u8>() {
            match T {
                $($t => asm!(concat!("tilezero tmm", $t), options(nostack, nomem)),)*
                _ => unreachable!(),
            }
        }

        /// Loads tile `T`'s rows from `base`, `stride` bytes apart.
        ///
        /// # Safety
        /// As [`zero`]; every row of the tile lies inside readable memory.
        #[inline(always)]
        pub(crate) unsafe fn load<const T: u8>(base: *const u8, stride: usize) {
            match T {
                $($t => asm!(concat!("tileloadd tmm", $t, ", [{b} + {s}*1]"),
                    b = in(reg) base, s = in(reg) stride, options(nostack, readonly)),)*
                _ => unreachable!(),
            }
        }

        /// Stores tile `T`'s rows at `base`, `stride` bytes apart.
        ///
        /// # Safety
        /// As [`zero`]; every row of the tile lies inside writable memory.
        #[inline(always)]
        pub(crate) unsafe fn store<const T: u8>(base: *mut u8, stride: usize) {
            match T {
                $($t => asm!(concat!("tilestored [{b} + {s}*1], tmm", $t),
                    b = in(reg) base, s = in(reg) stride, options(nostack)),)*
                _ => unreachable!(),
            }
        }
    };
}
tile_ops!(0, 1, 2, 3, 4, 5, 6, 7);

/// `C += A·B` for tile registers C (int32), A (signed bytes, one row per token) and B (unsigned
/// bytes, 4 consecutive codes of each of 16 rows per tile row).
///
/// # Safety
/// As [`zero`]; the three tiles' shapes agree.
#[inline(always)]
pub(crate) unsafe fn dpbsud<const C: u8, const A: u8, const B: u8>() {
    macro_rules! arm {
        ($($c:literal $a:literal $b:literal),*) => {
            match (C, A, B) {
                $(($c, $a, $b) => asm!(concat!("tdpbsud tmm", $c, ", tmm", $a, ", tmm", $b),
                    options(nostack, nomem)),)*
                _ => unreachable!(),
            }
        };
    }
    arm!(0 2 4, 1 3 5, 6 2 4, 7 3 5)
}
