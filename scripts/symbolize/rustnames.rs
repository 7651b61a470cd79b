// Functions whose mangled names exercise the Rust demanglers: generic
// types and functions, trait impls and trait objects, closures, nested
// modules, and a Unicode identifier.
#![no_std]
#![no_main]

use core::hint::black_box;
use core::panic::PanicInfo;

pub mod geometry {
    pub trait Shape {
        fn area(&self) -> u64;
    }
    pub struct Square(pub u64);
    pub struct Rect<T> {
        pub w: T,
        pub h: T,
    }
    impl Shape for Square {
        #[inline(never)]
        fn area(&self) -> u64 {
            core::hint::black_box(self.0 * self.0)
        }
    }
    impl<T: Copy + Into<u64>> Shape for Rect<T> {
        #[inline(never)]
        fn area(&self) -> u64 {
            core::hint::black_box(self.w.into() * self.h.into())
        }
    }
    pub mod nested {
        #[inline(never)]
        pub fn größe(x: u64) -> u64 {
            core::hint::black_box(x + 1)
        }
    }
}

use geometry::{nested, Rect, Shape, Square};

#[inline(never)]
fn total<S: Shape + ?Sized>(s: &S) -> u64 {
    black_box(s.area())
}

#[inline(never)]
fn apply<F: Fn(u64) -> u64>(f: F, x: u64) -> u64 {
    black_box(f(x))
}

#[inline(never)]
fn dynamic(s: &dyn Shape) -> u64 {
    black_box(s.area())
}

#[no_mangle]
pub extern "C" fn _start() -> ! {
    let k = black_box(3u64);
    let mut n = total(&Square(k)) + total(&Rect { w: 2u32, h: 5u32 }) + total(&Rect { w: 2u8, h: 5u8 });
    n += apply(|x| black_box(x * k), n);
    n += dynamic(&Square(n));
    n += nested::größe(n);
    unsafe { core::arch::asm!("syscall", in("rax") 60, in("rdi") n & 0, options(noreturn)) }
}

#[panic_handler]
fn panic(_: &PanicInfo) -> ! {
    loop {}
}
