X = "module-global"
rule write:
    output: "out/out.txt"
    params: extra="none"
    shell: "echo {config[who]} {params.extra} > {output}"
rule x:
    output: "out/x.txt"
    shell: "echo {X} {rule} > {output}"
rule prefixed:
    output: "out/prefixed.txt"
    shell: "echo body $PREFIX_FROM > {output}"
shell.prefix("PREFIX_FROM=prefix-from-{X}; ")
