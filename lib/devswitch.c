/*
 * Working on a given device from a thread whose current device may be
 * another (an application thread; CUDA's current device is per thread), and
 * giving that thread its own back afterwards; waiting, within a deadline,
 * for a stream's work.
 */
#include <stdio.h>
#include <time.h>

#include "clock.h"
#include "devapi.h"
#include "err.h"

int rcci_stream_drain(const rcci_devapi_t *dev, void *stream, int64_t deadline_ns)
{
    void *ev = NULL;
    int done = 0;
    if (dev->event_create(&ev) != RCC_SUCCESS)
        return 0;
    if (dev->event_record(ev, stream) == RCC_SUCCESS) {
        while (!done && rcci_now_ns() < deadline_ns && dev->event_query(ev, &done) == RCC_SUCCESS)
            if (!done)
                nanosleep(&(struct timespec){0, 50000}, NULL);
    } else {
        done = -1; /* never recorded: nothing will store it */
    }
    if (done)
        dev->event_destroy(ev);
    return done > 0;
}

rcc_result_t rcci_device_enter(const rcci_devapi_t *dev, int device, int *previous)
{
    *previous = dev->current_device();
    return *previous == device ? RCC_SUCCESS : dev->use_device(device);
}

void rcci_device_back(const rcci_devapi_t *dev, int previous, int device)
{
    if (previous == device || previous < 0)
        return;
    /* The failure being reported stays the thread's story, whatever this
     * switch says. */
    char text[RCCI_ERR_TEXT_BYTES], cause[RCCI_ERR_TEXT_BYTES];
    snprintf(text, sizeof text, "%s", rcci_tls_error());
    snprintf(cause, sizeof cause, "%s", rcci_tls_cause());
    dev->use_device(previous);
    rcci_tls_error_restore(text, cause);
}
