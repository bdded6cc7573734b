mod cli;
mod files;
mod harness;
mod http;
mod patch;
mod security;
mod stdio;
mod tools;
