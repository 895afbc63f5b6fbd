"""ringcc's element types and reduction operators (the C enums' values)."""
import enum


class Dtype(enum.IntEnum):
    INT8 = 0
    UINT8 = 1
    INT32 = 2
    UINT32 = 3
    INT64 = 4
    UINT64 = 5
    FLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BFLOAT16 = 9


class Op(enum.IntEnum):
    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    AVG = 4


def as_op(op):
    """An Op from an Op, its name ("sum", case-insensitive) or its value.
    Values outside the enum pass through, for the library to refuse."""
    if isinstance(op, str):
        try:
            return Op[op.upper()]
        except KeyError:
            raise ValueError(f"ringcc: unknown reduction {op!r} "
                             "(one of sum, prod, max, min, avg)") from None
    return int(op)
