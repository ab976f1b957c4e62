/* iothread-registry.c <-> iothread-qmp.c; not a public interface. */
#ifndef VBLK_EVENT_IOTHREAD_QMP_H
#define VBLK_EVENT_IOTHREAD_QMP_H

/* Register query-iothreads once QMP is set up; later calls do nothing. Context: main thread */
void iothread_qmp_register(void);

#endif
