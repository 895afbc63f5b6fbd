/* Progress on the terminal (ttyprogress.h). */
#include "ttyprogress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static FILE *tty;
static int tty_total;

void ttyprogress_start(int total)
{
    const char *run_tty = getenv("RCC_RUN_TTY");
    if (isatty(STDERR_FILENO))
        tty = stderr;
    else if (run_tty && !strcmp(run_tty, "1"))
        tty = fopen("/dev/tty", "w");
    tty_total = total;
}

void ttyprogress_step(int done, const char *what)
{
    if (!tty)
        return;
    int w = snprintf(NULL, 0, "%d", tty_total);
    /* \r and erase-to-end-of-line: the line is rewritten in place. */
    fprintf(tty, "\r\033[K[%*d/%d] %s", w, done, tty_total, what);
    fflush(tty);
}

void ttyprogress_end(void)
{
    if (!tty)
        return;
    fputs("\r\033[K", tty);
    fflush(tty);
    if (tty != stderr)
        fclose(tty);
    tty = NULL;
}
