//! JSON Schema to HIR (work in progress).

mod decimal;
mod digits;
mod elimination;
mod matcher;
mod numbers;
mod resolve;
mod strings;
