"""A run's time: the plan line's estimate before it starts (``plan``), and a finished run's figures
(``run_figures``) and critical path (``critical_path``). The per-step arithmetic they share is the report's
(``report.step_times``)."""
