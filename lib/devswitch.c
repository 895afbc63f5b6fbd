/*
 * Working on a given device from a thread whose current device may be
 * another (an application thread; CUDA's current device is per thread), and
 * giving that thread its own back afterwards.
 */
#include <stdio.h>

#include "devapi.h"
#include "err.h"

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
