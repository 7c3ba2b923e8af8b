from sweep.cli import main

raise SystemExit(main())
