mod cli;
mod harness;
mod http;
mod stdio;
mod tools;
