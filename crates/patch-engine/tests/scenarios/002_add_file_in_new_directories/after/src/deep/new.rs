fn main() {}

// end
