"""Reading inductor's generated code in the kernel tests (interpreted_worker.py, test_qkv_writes_cache.py)."""


def top_level_arguments(source: str, start: int = 0) -> list[str]:
    """The comma-separated arguments of the call whose opening parenthesis ends at `start` of `source`."""
    depth, arguments, current = 0, [], ""
    for char in source[start:]:
        if char == ")" and depth == 0:
            return [*arguments, current.strip()]
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            arguments.append(current.strip())
            current = ""
        else:
            current += char
    raise ValueError("unclosed call")
