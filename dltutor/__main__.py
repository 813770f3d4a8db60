from dltutor.cli import main

raise SystemExit(main())
