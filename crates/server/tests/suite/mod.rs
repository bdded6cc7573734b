mod cli;
mod files;
mod harness;
mod http;
mod security;
mod stdio;
mod tools;
