#include "pace.h"

int rcci_pace_class(uint64_t bytes)
{
    int c = bytes ? 63 - __builtin_clzll(bytes) : 0;
    return c < RCCI_PACE_CLASSES ? c : RCCI_PACE_CLASSES - 1;
}

void rcci_pace_record(rcci_pace_t *pace, uint64_t bytes, int nranks, int64_t ns)
{
    if (bytes == 0 || ns <= 0 || nranks < 2)
        return;
    uint64_t bit = 1ull << rcci_pace_class(bytes);
    if (!(pace->warm_set & bit)) {
        pace->warm_set |= bit;
        return;
    }
    /* In double: bytes x 2(n-1) x 10^6 overflows 64 bits from 4 TiB. */
    double busbw = (double)bytes * 2.0 * (nranks - 1) / nranks * 1e6 / (double)ns;
    int64_t now = busbw < 1 ? 1 : busbw > 1e15 ? (int64_t)1e15 : (int64_t)busbw;
    int64_t *avg = &pace->busbw[rcci_pace_class(bytes)];
    *avg = *avg ? *avg + (now - *avg) / 4 : now;
    pace->latest = now;
}

int64_t rcci_pace_busbw(const rcci_pace_t *pace, uint64_t bytes)
{
    int64_t avg = pace->busbw[rcci_pace_class(bytes)];
    return avg ? avg : pace->latest;
}

int rcci_pace_slow(rcci_pace_t *pace, uint64_t bytes, int64_t slow_mb_s, int *changed)
{
    int64_t busbw = rcci_pace_busbw(pace, bytes);
    int slow = busbw > 0 && busbw < slow_mb_s * 1000; /* MB/s = 1000 bytes per ms */
    uint64_t bit = 1ull << rcci_pace_class(bytes);
    *changed = slow != ((pace->slow_set & bit) != 0);
    pace->slow_set = slow ? pace->slow_set | bit : pace->slow_set & ~bit;
    return slow;
}
