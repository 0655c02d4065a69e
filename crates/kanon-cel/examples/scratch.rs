fn main() {
    let mut env = kanon_cel::Env::kubernetes();
    for name in ["object", "oldObject", "params"] {
        env.declare_variable(name, kanon_cel::Type::Dyn);
    }
    kanon_cel::library::admission::declare_variables(&mut env);
    for expr in std::env::args().skip(1) {
        match env.compile(&expr) {
            Ok(p) => println!("{expr}\n  => {}", p.result_type().runtime_text()),
            Err(e) => println!("{expr}\n  => ERROR {e}"),
        }
    }
}
